//! CAIP-2 network identifiers (`eip155:8453`, `solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp`).
//!
//! x402 v2 and the gateway API speak CAIP-2; x402 v1 used short names (`base`, `solana-devnet`).
//! [`Network`] parses both and always writes CAIP-2; [`Network::v1_name`] gives the short name
//! back where one exists.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The two chain families Tollgate settles on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ChainFamily {
    /// Ethereum-compatible chains (CAIP-2 namespace `eip155`).
    Evm,
    /// Solana clusters (CAIP-2 namespace `solana`).
    Solana,
}

impl ChainFamily {
    /// The CAIP-2 namespace of the family.
    #[must_use]
    pub const fn namespace(self) -> &'static str {
        match self {
            Self::Evm => "eip155",
            Self::Solana => "solana",
        }
    }

    /// Decimals of the family's native currency (ETH 18, SOL 9).
    #[must_use]
    pub const fn native_decimals(self) -> u8 {
        match self {
            Self::Evm => crate::amount::ETH_DECIMALS,
            Self::Solana => crate::amount::SOL_DECIMALS,
        }
    }

    /// The family whose transaction ids look like `text`: an EVM transaction hash (`0x` + 64 hex
    /// digits) or a Solana signature (base58 of 64 bytes); `None` for neither.
    #[must_use]
    pub fn of_transaction_id(text: &str) -> Option<Self> {
        if let Some(hex) = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
            return (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit())).then_some(Self::Evm);
        }
        let decoded = (text.len() <= 88).then(|| bs58::decode(text).into_vec().ok()).flatten();
        decoded.filter(|bytes| bytes.len() == 64).map(|_| Self::Solana)
    }

    /// Symbol of the family's usual native currency.
    #[must_use]
    pub const fn native_symbol(self) -> &'static str {
        match self {
            Self::Evm => "ETH",
            Self::Solana => "SOL",
        }
    }
}

impl fmt::Display for ChainFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.namespace())
    }
}

/// A CAIP-2 chain id of a family Tollgate supports.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Network {
    /// `eip155:<chain id>`.
    Eip155(u64),
    /// `solana:<first 32 characters of the base58 genesis hash>`.
    Solana(String),
}

/// Why a text is not a network this crate understands.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown network {0:?}: expected CAIP-2 (eip155:<chain id> or solana:<genesis hash prefix>) or an x402 v1 name"
)]
pub struct NetworkError(pub String);

/// Solana mainnet-beta genesis hash prefix.
pub const SOLANA_MAINNET: &str = "5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp";
/// Solana devnet genesis hash prefix.
pub const SOLANA_DEVNET: &str = "EtWTRABZaYq6iMfeYKouRu166VU2xqa1";
/// Solana testnet genesis hash prefix.
pub const SOLANA_TESTNET: &str = "4uhcVJyU9pJkvQyS88uRDiswHXSCkY3z";

/// x402 v1 network names and their CAIP-2 equivalents.
const V1_NAMES: &[(&str, KnownId)] = &[
    ("base", KnownId::Evm(8453)),
    ("base-sepolia", KnownId::Evm(84532)),
    ("avalanche", KnownId::Evm(43114)),
    ("avalanche-fuji", KnownId::Evm(43113)),
    ("polygon", KnownId::Evm(137)),
    ("polygon-amoy", KnownId::Evm(80002)),
    ("solana", KnownId::Solana(SOLANA_MAINNET)),
    ("solana-devnet", KnownId::Solana(SOLANA_DEVNET)),
    ("solana-testnet", KnownId::Solana(SOLANA_TESTNET)),
];

/// Every x402 v1 network name this crate knows (`base`, `solana-devnet`, ...).
pub fn v1_names() -> impl Iterator<Item = &'static str> {
    V1_NAMES.iter().map(|(name, _)| *name)
}

#[derive(Clone, Copy)]
enum KnownId {
    Evm(u64),
    Solana(&'static str),
}

impl KnownId {
    fn matches(self, network: &Network) -> bool {
        match (self, network) {
            (Self::Evm(a), Network::Eip155(b)) => a == *b,
            (Self::Solana(a), Network::Solana(b)) => a == b,
            _ => false,
        }
    }

    fn to_network(self) -> Network {
        match self {
            Self::Evm(id) => Network::Eip155(id),
            Self::Solana(genesis) => Network::Solana(genesis.to_owned()),
        }
    }
}

impl Network {
    /// `eip155:<chain_id>`.
    #[must_use]
    pub const fn eip155(chain_id: u64) -> Self {
        Self::Eip155(chain_id)
    }

    /// A Solana cluster from its genesis hash (full base58 hash or its 32-character prefix).
    #[must_use]
    pub fn solana_from_genesis(genesis_hash: &str) -> Self {
        Self::Solana(genesis_hash.chars().take(32).collect())
    }

    /// Solana mainnet-beta.
    #[must_use]
    pub fn solana_mainnet() -> Self {
        Self::Solana(SOLANA_MAINNET.to_owned())
    }

    /// Solana devnet.
    #[must_use]
    pub fn solana_devnet() -> Self {
        Self::Solana(SOLANA_DEVNET.to_owned())
    }

    /// The family of the chain.
    #[must_use]
    pub const fn family(&self) -> ChainFamily {
        match self {
            Self::Eip155(_) => ChainFamily::Evm,
            Self::Solana(_) => ChainFamily::Solana,
        }
    }

    /// The x402 v1 short name, when this network has one.
    #[must_use]
    pub fn v1_name(&self) -> Option<&'static str> {
        V1_NAMES.iter().find(|(_, id)| id.matches(self)).map(|(name, _)| *name)
    }

    /// The v1 short name when there is one, otherwise CAIP-2 (what to put in a v1 message).
    #[must_use]
    pub fn v1_name_or_caip2(&self) -> String {
        self.v1_name().map_or_else(|| self.to_string(), str::to_owned)
    }
}

impl fmt::Display for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Eip155(id) => write!(f, "eip155:{id}"),
            Self::Solana(genesis) => write!(f, "solana:{genesis}"),
        }
    }
}

impl FromStr for Network {
    type Err = NetworkError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || NetworkError(s.chars().take(80).collect());
        if let Some((_, id)) = V1_NAMES.iter().find(|(name, _)| *name == s) {
            return Ok(id.to_network());
        }
        let (namespace, reference) = s.split_once(':').ok_or_else(err)?;
        match namespace {
            "eip155" => {
                // Decimal chain id without sign or leading zeros.
                if reference.is_empty()
                    || (reference.len() > 1 && reference.starts_with('0'))
                    || !reference.bytes().all(|b| b.is_ascii_digit())
                {
                    return Err(err());
                }
                reference.parse::<u64>().map(Self::Eip155).map_err(|_| err())
            }
            "solana" => {
                // CAIP-2 references are 1..=32 characters; Solana uses base58 genesis prefixes.
                let ok = (1..=32).contains(&reference.len()) && bs58::decode(reference).into_vec().is_ok();
                if ok { Ok(Self::Solana(reference.to_owned())) } else { Err(err()) }
            }
            _ => Err(err()),
        }
    }
}

impl Serialize for Network {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Network {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Any network an x402 message can name, as the OpenAPI document describes it: a v1 name
/// (`base-sepolia`) or CAIP-2. A network this facilitator does not serve is a verdict
/// (`invalid_network`), not a malformed request.
#[cfg(feature = "openapi")]
#[derive(Debug, Clone, Copy)]
pub struct X402Network;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_names_map_to_caip2_and_back() {
        let cases = [
            ("base", "eip155:8453"),
            ("base-sepolia", "eip155:84532"),
            ("solana", "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp"),
            ("solana-devnet", "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1"),
        ];
        for (v1, caip2) in cases {
            let n: Network = v1.parse().unwrap();
            assert_eq!(n.to_string(), caip2);
            assert_eq!(n.v1_name(), Some(v1));
            assert_eq!(caip2.parse::<Network>().unwrap(), n);
        }
        assert_eq!(Network::eip155(31337).v1_name(), None);
        assert_eq!(Network::eip155(31337).v1_name_or_caip2(), "eip155:31337");
    }

    #[test]
    fn transaction_ids_tell_their_family() {
        let hash = format!("0x{}", "ab".repeat(32));
        let signature = bs58::encode([7u8; 64]).into_string();
        assert_eq!(ChainFamily::of_transaction_id(&hash), Some(ChainFamily::Evm));
        assert_eq!(ChainFamily::of_transaction_id(&hash.replacen("0x", "0X", 1)), Some(ChainFamily::Evm));
        assert_eq!(ChainFamily::of_transaction_id(&signature), Some(ChainFamily::Solana));
        let short_signature = bs58::encode([7u8; 63]).into_string();
        let long_hash = format!("{hash}00");
        for neither in ["", "0x", "abc", &short_signature, &long_hash, "0xzz", &"1".repeat(200)] {
            assert_eq!(ChainFamily::of_transaction_id(neither), None, "{neither}");
        }
    }

    #[test]
    fn rejects_malformed_ids() {
        for bad in [
            "",
            "eip155",
            "eip155:",
            "eip155:-1",
            "eip155:01",
            "eip155:0x1",
            "eip155:99999999999999999999",
            "solana:",
            "solana:0OIl",
            "cosmos:hub",
            "mainnet",
        ] {
            assert!(bad.parse::<Network>().is_err(), "{bad:?} accepted");
        }
        assert!("solana:123456789012345678901234567890123".parse::<Network>().is_err());
    }

    #[test]
    fn families() {
        assert_eq!(Network::eip155(1).family(), ChainFamily::Evm);
        assert_eq!(Network::solana_devnet().family(), ChainFamily::Solana);
        assert_eq!(
            Network::solana_from_genesis("EtWTRABZaYq6iMfeYKouRu166VU2xqa1G9cfcAZbhFwZ"),
            Network::solana_devnet()
        );
    }
}
