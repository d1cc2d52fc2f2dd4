//! EVM: what an x402 `exact` payment (EIP-3009) is made of — the token's ABI, the EIP-712
//! message the payer signs and its domain.

use alloy::primitives::{Address, U256};
use alloy::sol_types::Eip712Domain;

alloy::sol! {
    /// The ERC-20 reads and the EIP-3009 functions of a token that takes authorizations.
    interface Erc3009 {
        function name() external view returns (string);
        function symbol() external view returns (string);
        function decimals() external view returns (uint8);
        function totalSupply() external view returns (uint256);
        function balanceOf(address owner) external view returns (uint256);
        function version() external view returns (string);
        function authorizationState(address authorizer, bytes32 nonce) external view returns (bool);
        function transferWithAuthorization(
            address from,
            address to,
            uint256 value,
            uint256 validAfter,
            uint256 validBefore,
            bytes32 nonce,
            bytes signature
        ) external;
    }

    /// EIP-1271: signature checks by contract accounts.
    interface Erc1271 {
        function isValidSignature(bytes32 hash, bytes signature) external view returns (bytes4);
    }

    /// The EIP-712 message of EIP-3009.
    struct TransferWithAuthorization {
        address from;
        address to;
        uint256 value;
        uint256 validAfter;
        uint256 validBefore;
        bytes32 nonce;
    }
}

/// The EIP-712 domain an EIP-3009 authorization of `token` on chain `chain_id` is signed in:
/// the token's `name` and `version`, no salt.
#[must_use]
pub fn eip3009_domain(name: String, version: String, chain_id: u64, token: Address) -> Eip712Domain {
    Eip712Domain::new(Some(name.into()), Some(version.into()), Some(U256::from(chain_id)), Some(token), None)
}

/// The alloy address of a protocol EVM address (`None` for another chain's).
#[must_use]
pub fn address(a: &tollgate_protocol::Address) -> Option<alloy::primitives::Address> {
    match a {
        tollgate_protocol::Address::Evm(bytes) => Some(alloy::primitives::Address::from(*bytes)),
        tollgate_protocol::Address::Solana(_) => None,
    }
}

/// Whether `signature` has the form every on-chain check takes: 65 bytes (r, s, v) with `v` 27 or
/// 28. The `ecrecover` precompile (and so EIP-3009 tokens, Permit2 and the batch-settlement
/// contract) refuses a `v` of 0 or 1, and the contract needs all 65 bytes: a signature
/// recoverable off chain but not on chain would be served and never be claimable.
#[must_use]
pub fn ecrecover_form(signature: &[u8]) -> bool {
    signature.len() == 65 && matches!(signature[64], 27 | 28)
}

/// A verify-only libsecp256k1 context, made once.
#[cfg(feature = "recover")]
static SECP256K1: std::sync::LazyLock<secp256k1::Secp256k1<secp256k1::VerifyOnly>> =
    std::sync::LazyLock::new(secp256k1::Secp256k1::verification_only);

/// The account whose key made `signature` (65 bytes: r, s, v) over `digest`; `None` for a
/// malformed or malleable (high-s) signature, or one the chain would refuse
/// ([`ecrecover_form`]). Recovered with libsecp256k1: this runs on every
/// EIP-3009 verify and every batch voucher a seller checks, and is several times faster there
/// than the pure-Rust path.
#[cfg(feature = "recover")]
#[must_use]
pub fn recover_signer(digest: &alloy::primitives::B256, signature: &[u8]) -> Option<alloy::primitives::Address> {
    if !ecrecover_form(signature) {
        return None;
    }
    let signature = alloy::primitives::Signature::try_from(signature).ok()?;
    if signature.normalize_s().is_some() {
        return None;
    }
    let mut compact = [0u8; 64];
    compact[..32].copy_from_slice(&signature.r().to_be_bytes::<32>());
    compact[32..].copy_from_slice(&signature.s().to_be_bytes::<32>());
    let id = secp256k1::ecdsa::RecoveryId::try_from(i32::from(signature.v())).ok()?;
    let recoverable = secp256k1::ecdsa::RecoverableSignature::from_compact(&compact, id).ok()?;
    let key = SECP256K1.recover_ecdsa(secp256k1::Message::from_digest(digest.0), &recoverable).ok()?;
    Some(alloy::primitives::Address::from_raw_public_key(&key.serialize_uncompressed()[1..]))
}

#[cfg(test)]
mod tests {
    use alloy::primitives::{B256, address};
    use alloy::sol_types::{SolCall as _, SolStruct as _};

    use super::*;

    #[test]
    fn the_signed_message_and_the_call_are_eip_3009s() {
        // EIP-3009's type hash and function selector, as the standard gives them.
        let message = TransferWithAuthorization {
            from: Address::ZERO,
            to: Address::ZERO,
            value: U256::ZERO,
            validAfter: U256::ZERO,
            validBefore: U256::ZERO,
            nonce: B256::ZERO,
        };
        assert_eq!(
            format!("{:#x}", message.eip712_type_hash()),
            "0x7c7c6cdb67a18743f49ec6fa9b35f50d52ed05cbed4cc592e13b44501c1a2267"
        );
        // The overload taking the signature as bytes (USDC v2.2; EOAs and EIP-1271 wallets alike).
        assert_eq!(Erc3009::transferWithAuthorizationCall::SELECTOR, [0xcf, 0x09, 0x29, 0x95]);
        let domain =
            eip3009_domain("USD Coin".into(), "2".into(), 8453, address!("833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"));
        assert_eq!(domain.chain_id, Some(U256::from(8453)));
    }
}
