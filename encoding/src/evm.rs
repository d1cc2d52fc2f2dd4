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
