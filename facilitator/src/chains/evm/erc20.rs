//! ERC-20 and EIP-3009 (`transferWithAuthorization`) calls: encoding, reads, and token info.

use alloy::primitives::{Address, B256, Bytes, U256};
use alloy::rpc::types::TransactionRequest;
use alloy::sol_types::SolCall;
use tollgate_protocol::AtomicAmount;
use tollgate_protocol::gateway::{TokenInfo, TokenStandard};

use super::rpc::EvmRpc;
use crate::chains::ChainError;

pub use tollgate_encoding::evm::{Erc1271, Erc3009, TransferWithAuthorization};

/// EIP-1271's "valid" answer: `isValidSignature`'s own selector.
const ERC1271_MAGIC: [u8; 4] = [0x16, 0x26, 0xba, 0x7e];

/// Whether the wallet contract `wallet` says `signature` is its signature over `digest` (EIP-1271).
///
/// The answer's first word must be the magic value padded with zeros, exactly: a lenient decode
/// of a `bytes4` would accept an account that echoes its input (the identity precompile does),
/// since the call's own first four bytes are that same selector.
///
/// # Errors
/// [`ChainError`] when the node cannot be asked. A revert, or an account without code (which
/// answers nothing), is a "no".
pub async fn wallet_accepts(rpc: &EvmRpc, wallet: Address, digest: B256, signature: &[u8]) -> Result<bool, ChainError> {
    let call = Erc1271::isValidSignatureCall { hash: digest, signature: signature.to_vec().into() };
    let request = TransactionRequest::default().to(wallet).input(Bytes::from(call.abi_encode()).into());
    Ok(rpc.simulate(request).await?.is_ok_and(|answer| is_magic_word(&answer)))
}

/// Whether an EIP-1271 answer's first 32 bytes are the magic value followed by 28 zero bytes.
fn is_magic_word(answer: &[u8]) -> bool {
    answer.len() >= 32 && answer[..4] == ERC1271_MAGIC && answer[4..32].iter().all(|b| *b == 0)
}

/// Calls a view function of `contract` and decodes its answer.
///
/// # Errors
/// [`ChainError`] when the call reverts, the node fails, or the answer does not decode.
pub async fn view<C: SolCall>(rpc: &EvmRpc, contract: Address, call: &C) -> Result<C::Return, ChainError> {
    let request = TransactionRequest::default().to(contract).input(Bytes::from(call.abi_encode()).into());
    let answer = rpc.call(request).await?;
    C::abi_decode_returns(&answer).map_err(|e| ChainError(format!("{contract} answered {} badly: {e}", C::SIGNATURE)))
}

/// Base units of `token` held by `owner`.
///
/// # Errors
/// [`ChainError`] when the token cannot be read.
pub async fn balance_of(rpc: &EvmRpc, token: Address, owner: Address) -> Result<U256, ChainError> {
    view(rpc, token, &Erc3009::balanceOfCall { owner }).await
}

/// Whether `authorizer` used the EIP-3009 `nonce` already.
///
/// # Errors
/// [`ChainError`] when the token cannot be read.
pub async fn authorization_used(
    rpc: &EvmRpc,
    token: Address,
    authorizer: Address,
    nonce: B256,
) -> Result<bool, ChainError> {
    view(rpc, token, &Erc3009::authorizationStateCall { authorizer, nonce }).await
}

/// Name, symbol, decimals and supply of an ERC-20 at `address`; `None` when there is no contract
/// there or it does not answer as a token.
///
/// # Errors
/// [`ChainError`] when the node fails.
pub async fn token_info(rpc: &EvmRpc, address: Address) -> Result<Option<TokenInfo>, ChainError> {
    if rpc.code(address).await?.is_empty() {
        return Ok(None);
    }
    // A contract that reverts or answers garbage to these calls is not an ERC-20.
    let (Ok(decimals), Ok(supply)) =
        (view(rpc, address, &Erc3009::decimalsCall {}).await, view(rpc, address, &Erc3009::totalSupplyCall {}).await)
    else {
        return Ok(None);
    };
    let Ok(supply) = u128::try_from(supply) else { return Ok(None) };
    // Name and symbol are optional in ERC-20.
    let name = view(rpc, address, &Erc3009::nameCall {}).await.ok();
    let symbol = view(rpc, address, &Erc3009::symbolCall {}).await.ok();
    Ok(Some(TokenInfo {
        address: super::protocol_address(address).to_string(),
        network: rpc.network().clone(),
        standard: TokenStandard::Erc20,
        name,
        symbol,
        decimals,
        supply: AtomicAmount(supply),
        mint_authority: None,
        freeze_authority: None,
        extensions: Vec::new(),
        refused: None,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn word(head: &[u8]) -> Vec<u8> {
        let mut word = head.to_vec();
        word.resize(32, 0);
        word
    }

    #[test]
    fn only_the_padded_magic_word_is_a_yes() {
        assert!(is_magic_word(&word(&ERC1271_MAGIC)));
        // What the identity precompile answers: the call itself, selector then the digest.
        let call = Erc1271::isValidSignatureCall { hash: B256::repeat_byte(7), signature: vec![1u8; 65].into() };
        assert!(!is_magic_word(&call.abi_encode()));
        assert!(!is_magic_word(&ERC1271_MAGIC), "four bytes are not an ABI word");
        assert!(!is_magic_word(&[]), "an account without code answers nothing");
        assert!(!is_magic_word(&word(&[0xff, 0xff, 0xff, 0xff])));
    }
}
