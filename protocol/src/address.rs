//! Wallet addresses of both families, validated.
//!
//! * EVM: `0x` + 40 hex digits. All-lowercase or all-uppercase is accepted as is; mixed case must
//!   be a valid EIP-55 checksum (a typo in a checksummed address is caught, not paid to).
//! * Solana: base58 text decoding to exactly 32 bytes.
//!
//! The family follows from the text, so the gateway API needs no separate chain field.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha3::{Digest, Keccak256};

use crate::network::ChainFamily;

/// A regular expression every address matches: `0x` + 40 hex digits, or 32 to 44 base58
/// characters (what else an address must be, its checksum or decoded length, it cannot say).
pub const PATTERN: &str = "^(0x[0-9a-fA-F]{40}|[1-9A-HJ-NP-Za-km-z]{32,44})$";

/// A validated address. Displays in canonical form (EIP-55 for EVM, base58 for Solana).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Address {
    /// A 20-byte EVM account.
    Evm([u8; 20]),
    /// A 32-byte Solana public key.
    Solana([u8; 32]),
}

/// Why a text is not an address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AddressError {
    /// Nothing given.
    #[error("address is empty")]
    Empty,
    /// `0x` prefix but not 40 hex digits.
    #[error("EVM address must be 0x followed by 40 hex digits")]
    EvmFormat,
    /// Mixed case that is not the EIP-55 checksum.
    #[error("EVM address has an invalid EIP-55 checksum (expected {expected})")]
    EvmChecksum {
        /// The correctly checksummed form.
        expected: String,
    },
    /// Not base58 or not 32 bytes.
    #[error("Solana address must be base58 encoding exactly 32 bytes")]
    SolanaFormat,
}

impl Address {
    /// The family the address belongs to.
    #[must_use]
    pub const fn family(&self) -> ChainFamily {
        match self {
            Self::Evm(_) => ChainFamily::Evm,
            Self::Solana(_) => ChainFamily::Solana,
        }
    }

    /// The raw bytes (20 for EVM, 32 for Solana).
    #[must_use]
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Self::Evm(b) => b,
            Self::Solana(b) => b,
        }
    }

    /// The family a text looks like, without fully validating it.
    #[must_use]
    pub fn detect_family(text: &str) -> Option<ChainFamily> {
        if text.starts_with("0x") || text.starts_with("0X") {
            Some(ChainFamily::Evm)
        } else if !text.is_empty() && text.bytes().all(is_base58_char) {
            Some(ChainFamily::Solana)
        } else {
            None
        }
    }
}

fn is_base58_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() && !matches!(b, b'0' | b'O' | b'I' | b'l')
}

/// EIP-55: hex digit `i` is upper case when nibble `i` of keccak256(lowercase hex) is ≥ 8.
/// `0x` and the 40 digits, as ASCII (no allocation: addresses are read and written on every
/// request).
fn eip55(bytes: &[u8; 20]) -> [u8; 42] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut lower = [0u8; 40];
    for (i, b) in bytes.iter().enumerate() {
        lower[2 * i] = HEX[usize::from(b >> 4)];
        lower[2 * i + 1] = HEX[usize::from(b & 0x0f)];
    }
    let hash = Keccak256::digest(lower);
    let mut out = [0u8; 42];
    out[..2].copy_from_slice(b"0x");
    for (i, c) in lower.iter().enumerate() {
        let nibble = (hash[i / 2] >> if i % 2 == 0 { 4 } else { 0 }) & 0x0f;
        out[2 + i] = if nibble >= 8 { c.to_ascii_uppercase() } else { *c };
    }
    out
}

/// The text of an ASCII buffer (always valid: the encoders here write ASCII only).
fn ascii(buf: &[u8]) -> &str {
    std::str::from_utf8(buf).unwrap_or_default()
}

impl FromStr for Address {
    type Err = AddressError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.is_empty() {
            return Err(AddressError::Empty);
        }
        if let Some(hex) = s.strip_prefix("0x") {
            if hex.len() != 40 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(AddressError::EvmFormat);
            }
            let mut bytes = [0u8; 20];
            for (i, chunk) in hex.as_bytes().chunks(2).enumerate() {
                let pair = std::str::from_utf8(chunk).map_err(|_| AddressError::EvmFormat)?;
                bytes[i] = u8::from_str_radix(pair, 16).map_err(|_| AddressError::EvmFormat)?;
            }
            let mixed = hex.bytes().any(|b| b.is_ascii_lowercase()) && hex.bytes().any(|b| b.is_ascii_uppercase());
            if mixed {
                let expected = eip55(&bytes);
                if expected != s.as_bytes() {
                    return Err(AddressError::EvmChecksum { expected: ascii(&expected).to_owned() });
                }
            }
            return Ok(Self::Evm(bytes));
        }
        if s.len() > 44 || !s.bytes().all(is_base58_char) {
            return Err(AddressError::SolanaFormat);
        }
        let decoded = bs58::decode(s).into_vec().map_err(|_| AddressError::SolanaFormat)?;
        let bytes: [u8; 32] = decoded.try_into().map_err(|_| AddressError::SolanaFormat)?;
        Ok(Self::Solana(bytes))
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Evm(bytes) => f.write_str(ascii(&eip55(bytes))),
            Self::Solana(bytes) => {
                // 32 bytes are at most 44 base58 digits.
                let mut text = [0u8; 44];
                let len = bs58::encode(bytes).onto(&mut text[..]).map_err(|_| fmt::Error)?;
                f.write_str(ascii(&text[..len]))
            }
        }
    }
}

impl fmt::Debug for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Address({self})")
    }
}

impl Serialize for Address {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Address {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn evm_checksum_is_checked_only_for_mixed_case() {
        // EIP-55 test vectors.
        for good in [
            "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed",
            "0xfB6916095ca1df60bB79Ce92cE3Ea74c37c5d359",
            "0xdbF03B407c01E7cD3CBea99509d93f8DDDC8C6FB",
            "0xD1220A0cf47c7B9Be7A2E6BA89F429762e7b9aDb",
        ] {
            let a: Address = good.parse().unwrap();
            assert_eq!(a.to_string(), good);
            assert_eq!(a.family(), ChainFamily::Evm);
            assert_eq!(good.to_lowercase().parse::<Address>().unwrap(), a);
        }
        let typo = "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAeD";
        assert_eq!(
            typo.parse::<Address>(),
            Err(AddressError::EvmChecksum { expected: "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed".into() })
        );
        assert_eq!("0x123".parse::<Address>(), Err(AddressError::EvmFormat));
        assert_eq!("0xZZ5aeb6053f3e94c9b9a09f33669435e7ef1beaed0".parse::<Address>(), Err(AddressError::EvmFormat));
    }

    #[test]
    fn solana_keys_are_32_bytes_of_base58() {
        let a: Address = "9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin".parse().unwrap();
        assert_eq!(a.family(), ChainFamily::Solana);
        assert_eq!(a.to_string(), "9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin");
        assert_eq!("11111111111111111111111111111111".parse::<Address>().unwrap(), Address::Solana([0; 32]));
        assert_eq!(Address::Solana([0; 32]).to_string(), "11111111111111111111111111111111");
        // The longest key: 44 digits.
        let longest = Address::Solana([0xff; 32]).to_string();
        assert_eq!(longest.len(), 44);
        assert_eq!(longest.parse::<Address>().unwrap(), Address::Solana([0xff; 32]));
        assert_eq!("9xQeWvG816bUx9EPjHmaT23".parse::<Address>(), Err(AddressError::SolanaFormat));
        assert_eq!("9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFi0".parse::<Address>(), Err(AddressError::SolanaFormat));
        assert_eq!("".parse::<Address>(), Err(AddressError::Empty));
        assert_eq!(Address::detect_family("0xabc"), Some(ChainFamily::Evm));
        assert_eq!(Address::detect_family("9xQe"), Some(ChainFamily::Solana));
        assert_eq!(Address::detect_family("not an address!"), None);
    }

    proptest! {
        #[test]
        fn display_parses_back(evm in any::<[u8; 20]>(), sol in any::<[u8; 32]>()) {
            for a in [Address::Evm(evm), Address::Solana(sol)] {
                prop_assert_eq!(a.to_string().parse::<Address>(), Ok(a));
            }
        }

        #[test]
        fn parse_never_panics(text in "\\PC{0,64}") {
            let _ = text.parse::<Address>();
        }
    }
}
