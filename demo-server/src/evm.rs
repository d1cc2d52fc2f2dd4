//! The demo's EVM side on a local development node (anvil): funded accounts, an EIP-3009
//! token, and Permit2 with a token paid through it (EIP-2612, so the buyer needs no gas to let
//! Permit2 spend it), made with `anvil_setBalance`, `anvil_setCode` and real deployments.

use std::path::Path;

use alloy::primitives::U256;
use alloy::signers::local::PrivateKeySigner;
use tollgate_facilitator::AppState;
use tollgate_facilitator::chains::evm::rpc::{DEFAULT_CALL_TIMEOUT, EvmRpc};
use tollgate_facilitator::devnet::{DevToken, TokenKind, install_batch_settlement, install_permit2, set_evm_balance};

use crate::shop::{DEMO_TOKEN_DECIMALS, DEMO_TOKEN_NAME, DEMO_TOKEN_SYMBOL, PERMIT2_TOKEN_NAME, PERMIT2_TOKEN_SYMBOL};
use crate::{DEMO_FUNDING_TOKENS, EvmDemo};

/// One ETH in wei.
const ETH: u128 = 1_000_000_000_000_000_000;

/// The chain id the node at `url` reports.
pub(crate) async fn chain_id(url: &str) -> anyhow::Result<u64> {
    let rpc = EvmRpc::connect(url, DEFAULT_CALL_TIMEOUT)
        .await
        .map_err(|e| anyhow::anyhow!("the EVM node at {url} does not answer: {e}"))?;
    Ok(rpc.chain_id())
}

/// Funds the facilitator's signer and a new buyer, deploys the demo token and gives the buyer
/// some, and places the batch-settlement contracts; the buyer's key is written to `data_dir`.
/// `seller` is paid (a custodial wallet of the seller's account: the facilitator signs its
/// channels' claims as their delegated receiver authorizer).
pub(crate) async fn prepare(
    state: &AppState,
    (url, chain_id): (&str, u64),
    data_dir: &Path,
    facilitator_signer: &PrivateKeySigner,
    seller: &str,
) -> anyhow::Result<EvmDemo> {
    let network = tollgate_protocol::Network::eip155(chain_id);
    let backend =
        state.chains.evm(&network).ok_or_else(|| anyhow::anyhow!("the facilitator has no backend for {network}"))?;
    let rpc = &backend.rpc;
    let (buyer, minter) = (PrivateKeySigner::random(), PrivateKeySigner::random());
    let dev_node = |e| anyhow::anyhow!("{url} is not a development node that funds accounts (anvil): {e}");
    for (who, eth) in [(facilitator_signer, 100), (&buyer, 10), (&minter, 1)] {
        set_evm_balance(rpc, who.address(), U256::from(eth * ETH)).await.map_err(dev_node)?;
    }
    let token = DevToken::deploy(
        rpc,
        minter.clone(),
        TokenKind::Eip3009,
        (DEMO_TOKEN_NAME, DEMO_TOKEN_SYMBOL, DEMO_TOKEN_DECIMALS),
    )
    .await?;
    let whole = U256::from(10u64.pow(u32::from(DEMO_TOKEN_DECIMALS)));
    // The payment channels of the per-call route (x402 batch-settlement).
    install_batch_settlement(rpc, &minter).await?;
    token.mint(rpc, buyer.address(), U256::from(DEMO_FUNDING_TOKENS) * whole).await?;
    // Permit2 and its x402 proxies, then a token paid through them (not EIP-3009).
    let permit2_token = match install_permit2(rpc, &minter).await {
        Ok(()) => {
            let kind = TokenKind::Eip2612;
            let named = (PERMIT2_TOKEN_NAME, PERMIT2_TOKEN_SYMBOL, DEMO_TOKEN_DECIMALS);
            let permit2_token = DevToken::deploy(rpc, minter, kind, named).await?;
            permit2_token.mint(rpc, buyer.address(), U256::from(DEMO_FUNDING_TOKENS) * whole).await?;
            Some(permit2_token.address.to_checksum(None))
        }
        Err(e) => {
            tracing::warn!(error = %e, "no Permit2 on the EVM node: the Permit2 and metered routes are left out");
            None
        }
    };
    let buyer_key_file = data_dir.join("demo-buyer-evm.key");
    crate::write_private(&buyer_key_file, &format!("0x{}\n", alloy::hex::encode(buyer.to_bytes())))?;
    Ok(EvmDemo {
        rpc_url: url.to_owned(),
        chain_id,
        buyer_key_file,
        buyer: buyer.address().to_checksum(None),
        seller: seller.to_owned(),
        token: token.address.to_checksum(None),
        permit2_token,
    })
}
