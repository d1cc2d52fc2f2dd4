//! EVM through Permit2: what an x402 `exact` (with `assetTransferMethod: "permit2"`) or `upto`
//! payment is made of — any ERC-20, moved by Uniswap's Permit2 under the payer's signature, with
//! an x402 proxy as the spender the payer signs for.
//!
//! The payer signs, in Permit2's EIP-712 domain, a `PermitWitnessTransferFrom`: the token and
//! most amount, the proxy as spender, a nonce (one bit of Permit2's nonce bitmap), a deadline,
//! and a witness the proxy checks — the recipient and when it becomes valid; for `upto` also the
//! facilitator allowed to settle. The proxy calls Permit2 with that witness, so whoever sends the
//! settlement can neither redirect the money nor (for `exact`) choose the amount.

use alloy::primitives::{Address, B256, U256, address};
use alloy::sol_types::{Eip712Domain, SolStruct as _};

/// Uniswap's Permit2, at the same address on every chain.
pub const PERMIT2: Address = address!("000000000022D473030F116dDEE9F6B43aC78BA3");
/// The x402 proxy that settles `exact` through Permit2 (the whole permitted amount).
pub const EXACT_PROXY: Address = address!("402085c248EeA27D92E8b30b2C58ed07f9E20001");
/// The x402 proxy that settles `upto` through Permit2 (any amount up to the permitted one).
pub const UPTO_PROXY: Address = address!("4020A4f3b7b90ccA423B9fabCc0CE57C6C240002");

/// The EIP-712 domain of Permit2 on chain `chain_id`: name `Permit2`, no version, no salt.
#[must_use]
pub fn domain(chain_id: u64) -> Eip712Domain {
    Eip712Domain::new(Some("Permit2".into()), None, Some(U256::from(chain_id)), Some(PERMIT2), None)
}

alloy::sol! {
    /// The ERC-20 calls a Permit2 payment needs besides Permit2's: the allowance it spends, the
    /// approval that grants it, and EIP-2612's signed approval.
    interface Erc20 {
        function allowance(address owner, address spender) external view returns (uint256);
        function approve(address spender, uint256 value) external returns (bool);
        function nonces(address owner) external view returns (uint256);
        function permit(address owner, address spender, uint256 value, uint256 deadline, uint8 v, bytes32 r, bytes32 s) external;
    }

    /// What Permit2 is asked: which nonces an owner has used (a bitmap of 256 per word).
    interface Permit2 {
        function nonceBitmap(address owner, uint256 word) external view returns (uint256);
    }

    /// EIP-2612's message: an approval signed by the owner.
    struct Permit {
        address owner;
        address spender;
        uint256 value;
        uint256 nonce;
        uint256 deadline;
    }
}

/// x402 `exact` through Permit2: the witness names the recipient and when it becomes valid.
pub mod exact {
    alloy::sol! {
        /// The signed permit's token and amount.
        struct TokenPermissions {
            address token;
            uint256 amount;
        }

        /// What the proxy binds into the signature.
        struct Witness {
            address to;
            uint256 validAfter;
        }

        /// The EIP-712 message the payer signs (its spender: [`super::EXACT_PROXY`]).
        struct PermitWitnessTransferFrom {
            TokenPermissions permitted;
            address spender;
            uint256 nonce;
            uint256 deadline;
            Witness witness;
        }

        /// The exact proxy.
        interface ExactProxy {
            struct PermitTransferFrom {
                TokenPermissions permitted;
                uint256 nonce;
                uint256 deadline;
            }

            struct Eip2612Permit {
                uint256 value;
                uint256 deadline;
                bytes32 r;
                bytes32 s;
                uint8 v;
            }

            function settle(PermitTransferFrom permit, address owner, Witness witness, bytes signature) external;
            function settleWithPermit(
                Eip2612Permit permit2612,
                PermitTransferFrom permit,
                address owner,
                Witness witness,
                bytes signature
            ) external;
        }
    }
}

/// x402 `upto` through Permit2: the witness names the recipient, the facilitator allowed to
/// settle (the only one that may choose the amount), and when it becomes valid.
pub mod upto {
    alloy::sol! {
        /// The signed permit's token and most amount.
        struct TokenPermissions {
            address token;
            uint256 amount;
        }

        /// What the proxy binds into the signature.
        struct Witness {
            address to;
            address facilitator;
            uint256 validAfter;
        }

        /// The EIP-712 message the payer signs (its spender: [`super::UPTO_PROXY`]).
        struct PermitWitnessTransferFrom {
            TokenPermissions permitted;
            address spender;
            uint256 nonce;
            uint256 deadline;
            Witness witness;
        }

        /// The upto proxy.
        interface UptoProxy {
            struct PermitTransferFrom {
                TokenPermissions permitted;
                uint256 nonce;
                uint256 deadline;
            }

            struct Eip2612Permit {
                uint256 value;
                uint256 deadline;
                bytes32 r;
                bytes32 s;
                uint8 v;
            }

            function settle(PermitTransferFrom permit, uint256 amount, address owner, Witness witness, bytes signature) external;
            function settleWithPermit(
                Eip2612Permit permit2612,
                PermitTransferFrom permit,
                uint256 amount,
                address owner,
                Witness witness,
                bytes signature
            ) external;
        }
    }
}

/// What an x402 payer signs through Permit2, for either proxy: `exact` when it names no
/// facilitator, `upto` when it names the one allowed to settle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Permit2Message {
    /// The token moved.
    pub token: Address,
    /// Its amount (`upto`: the most).
    pub amount: U256,
    /// The proxy allowed to spend: [`EXACT_PROXY`] or [`UPTO_PROXY`].
    pub spender: Address,
    /// A Permit2 nonce of the payer's (one bit of its bitmap).
    pub nonce: U256,
    /// Unix seconds until which it may be settled.
    pub deadline: U256,
    /// The recipient (the witness's `to`).
    pub to: Address,
    /// `upto`: the account allowed to settle.
    pub facilitator: Option<Address>,
    /// Unix seconds from which it may be settled.
    pub valid_after: U256,
}

impl Permit2Message {
    /// The EIP-712 digest signed, in Permit2's domain on chain `chain_id`.
    #[must_use]
    pub fn signing_hash(&self, chain_id: u64) -> B256 {
        let domain = domain(chain_id);
        match self.facilitator {
            None => exact::PermitWitnessTransferFrom {
                permitted: exact::TokenPermissions { token: self.token, amount: self.amount },
                spender: self.spender,
                nonce: self.nonce,
                deadline: self.deadline,
                witness: exact::Witness { to: self.to, validAfter: self.valid_after },
            }
            .eip712_signing_hash(&domain),
            Some(facilitator) => upto::PermitWitnessTransferFrom {
                permitted: upto::TokenPermissions { token: self.token, amount: self.amount },
                spender: self.spender,
                nonce: self.nonce,
                deadline: self.deadline,
                witness: upto::Witness { to: self.to, facilitator, validAfter: self.valid_after },
            }
            .eip712_signing_hash(&domain),
        }
    }
}

/// The EIP-2612 digest by which `owner` lets `spender` move `value` of `token` until
/// `deadline`, with its EIP-2612 `nonce`, in the token's domain (`name`, `version`, chain).
#[must_use]
pub fn eip2612_signing_hash((name, version, chain_id): (&str, &str, u64), token: Address, permit: &Permit) -> B256 {
    // An EIP-2612 token's domain is built as EIP-3009's: name, version, chain, the token.
    permit.eip712_signing_hash(&crate::evm::eip3009_domain(name.to_owned(), version.to_owned(), chain_id, token))
}

/// The word and bit of Permit2's nonce bitmap that `nonce` uses.
#[must_use]
pub fn nonce_position(nonce: U256) -> (U256, u8) {
    (nonce >> 8, u8::try_from(nonce & U256::from(0xff)).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use alloy::sol_types::{SolCall as _, SolStruct as _};

    use super::*;

    #[test]
    fn the_signed_types_are_the_proxies() {
        // The type strings Permit2 hashes: the proxies' WITNESS_TYPE_STRING after Permit2's stub.
        let stub =
            "PermitWitnessTransferFrom(TokenPermissions permitted,address spender,uint256 nonce,uint256 deadline,";
        assert_eq!(
            exact::PermitWitnessTransferFrom::eip712_encode_type(),
            format!(
                "{stub}Witness witness)TokenPermissions(address token,uint256 amount)Witness(address to,uint256 validAfter)"
            )
        );
        assert_eq!(
            upto::PermitWitnessTransferFrom::eip712_encode_type(),
            format!(
                "{stub}Witness witness)TokenPermissions(address token,uint256 amount)Witness(address to,address facilitator,uint256 validAfter)"
            )
        );
        // Each proxy's settle, as its ABI gives it.
        assert_eq!(
            exact::ExactProxy::settleCall::SIGNATURE,
            "settle(((address,uint256),uint256,uint256),address,(address,uint256),bytes)"
        );
        assert_eq!(
            upto::UptoProxy::settleCall::SIGNATURE,
            "settle(((address,uint256),uint256,uint256),uint256,address,(address,address,uint256),bytes)"
        );
        assert_eq!(nonce_position(U256::from(0x1_05)), (U256::from(1), 5));
    }
}
