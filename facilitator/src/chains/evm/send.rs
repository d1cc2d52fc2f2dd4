//! Native ETH transfers the facilitator makes (hosted sends from a custodial wallet, each under a
//! nonce of its own) or builds (local mode), and what the chain says about a transaction reported
//! for a local payment.

use alloy::primitives::U256;
use alloy::rpc::types::TransactionRequest;
use alloy::signers::local::PrivateKeySigner;
use async_trait::async_trait;
use tollgate_protocol::{AtomicAmount, ChainFamily, DecimalAmount};

use super::build::{self, TRANSFER_GAS, Transfer};
use super::nonce::NonceManager;
use super::rpc::EvmRpc;
use super::{EvmBackend, address};
use crate::chains::{ChainError, Order, OrderError, Outgoing, PlannedSend, Signable, Unsigned};

/// Blocks after building during which a local-mode transaction is expected to land; past them
/// (with `expiresAt`, 60 s) the service treats it as expired when the chain does not have it.
pub const HORIZON_BLOCKS: u64 = 50;

fn eth(wei: U256) -> String {
    let wei = u128::try_from(wei).unwrap_or(u128::MAX);
    DecimalAmount::from_atomic(AtomicAmount(wei), ChainFamily::Evm.native_decimals()).to_string()
}

/// The order's transfer with its gas and fees priced (nonce 0, for the caller to set): 21,000
/// gas to an account without code, the node's estimate (within the backend's cap) to a contract;
/// the node's EIP-1559 fees, with the tip spread from `priority_fee` (total wei) when one is given.
async fn priced(backend: &EvmBackend, order: &Order) -> Result<(alloy::primitives::Address, Transfer), OrderError> {
    let (Some(from), Some(to)) = (address(&order.from), address(&order.to)) else {
        return Err(OrderError::InvalidRecipient("both addresses must be EVM addresses".into()));
    };
    let rpc = &backend.rpc;
    let value = U256::from(order.amount.get());
    let gas_limit = if rpc.code(to).await?.is_empty() {
        TRANSFER_GAS
    } else {
        let request = TransactionRequest::default().from(from).to(to).value(value);
        rpc.estimate_gas(request).await.map_err(|_| {
            OrderError::InvalidRecipient("the recipient is a contract that does not accept this payment".into())
        })?
    };
    if gas_limit > backend.max_gas {
        return Err(OrderError::InvalidRecipient(format!(
            "paying this recipient needs {gas_limit} gas, more than the {} allowed",
            backend.max_gas
        )));
    }
    let fees = rpc.fees().await?;
    let tip = order.priority_fee.map_or(fees.max_priority_fee_per_gas, |total| total.get() / u128::from(gas_limit));
    let max_fee = fees.max_fee_per_gas.saturating_sub(fees.max_priority_fee_per_gas).saturating_add(tip);
    let transfer = Transfer {
        chain_id: rpc.chain_id(),
        nonce: 0,
        to,
        value,
        gas_limit,
        max_fee_per_gas: max_fee,
        max_priority_fee_per_gas: tip,
    };
    Ok((from, transfer))
}

/// The most wei per gas a hosted send's fee cap is lowered by, at random, each time it is signed.
///
/// Two identical sends signed under the same nonce (the first one's broadcast was lost, or went
/// nobody knows where) would otherwise be the same bytes, hence the same transaction; with a
/// different cap they are two transactions of which at most one can land. The cap bounds the
/// price, it is not the price (base fee plus tip, both unchanged), so what is paid does not move.
const FEE_CAP_SPREAD: u128 = 1_000_000;

/// Plans a hosted send from `signer`'s wallet, checking it can pay the value and the most the
/// gas can cost.
pub(super) async fn plan(
    backend: &EvmBackend,
    order: &Order,
    signer: PrivateKeySigner,
) -> Result<PlannedSend, OrderError> {
    let (from, transfer) = priced(backend, order).await?;
    // Quoted and checked at the highest cap signing can draw.
    let transfer = Transfer { max_fee_per_gas: transfer.max_fee_per_gas.saturating_add(FEE_CAP_SPREAD), ..transfer };
    if signer.address() != from {
        return Err(OrderError::Invalid("the wallet's key does not match walletAddress".into()));
    }
    let balance = backend.rpc.balance(from).await?;
    let max_cost = transfer.max_cost();
    if balance < max_cost {
        return Err(OrderError::InsufficientBalance(format!(
            "the wallet holds {} ETH; the payment needs up to {} ETH ({} + at most {} fee)",
            eth(balance),
            eth(max_cost),
            eth(transfer.value),
            eth(max_cost - transfer.value)
        )));
    }
    let fee = AtomicAmount(u128::from(transfer.gas_limit).saturating_mul(transfer.max_fee_per_gas));
    let tx = HostedTransfer { rpc: backend.rpc.clone(), nonces: backend.nonces.clone(), signer, transfer };
    Ok(PlannedSend { fee, tx: Box::new(tx) })
}

/// A hosted send, signed under the wallet's next nonce each time it is asked to.
struct HostedTransfer {
    rpc: EvmRpc,
    nonces: std::sync::Arc<NonceManager>,
    signer: PrivateKeySigner,
    transfer: Transfer,
}

#[async_trait]
impl Signable for HostedTransfer {
    async fn sign(&self) -> Result<Outgoing, ChainError> {
        let lease = self.nonces.lease(&self.rpc, self.signer.address()).await?;
        let lowered = rand::random_range(0..FEE_CAP_SPREAD);
        let transfer = Transfer {
            nonce: lease.nonce(),
            max_fee_per_gas: self
                .transfer
                .max_fee_per_gas
                .saturating_sub(lowered)
                .max(self.transfer.max_priority_fee_per_gas),
            ..self.transfer
        };
        let (raw, hash) =
            build::sign(transfer.tx(), &self.signer).map_err(|e| ChainError(format!("cannot sign: {e}")))?;
        Ok(Outgoing { tx_id: format!("{hash:#x}"), raw, horizon: None, hold: Some(Box::new(lease)) })
    }
}

/// Builds an unsigned EIP-1559 transfer for the payer to sign (its signing payload,
/// `0x02 || rlp([...])`), with the payer's next nonce and a fee cap of its own (drawn as a hosted
/// send's): two builds of one order are two transactions, and a transfer that lands is the
/// payment of the build it signed, of no other.
pub(super) async fn build(backend: &EvmBackend, order: &Order) -> Result<Unsigned, OrderError> {
    let (from, transfer) = priced(backend, order).await?;
    let rpc = &backend.rpc;
    let lowered = rand::random_range(0..FEE_CAP_SPREAD);
    let transfer = Transfer {
        nonce: rpc.pending_nonce(from).await?,
        max_fee_per_gas: transfer.max_fee_per_gas.saturating_add(FEE_CAP_SPREAD).saturating_sub(lowered),
        ..transfer
    };
    if rpc.balance(from).await? < transfer.max_cost() {
        return Err(OrderError::InsufficientBalance(
            "the wallet cannot pay the amount plus the most the gas can cost".into(),
        ));
    }
    let horizon = rpc.block_number().await?.saturating_add(HORIZON_BLOCKS);
    let fee = AtomicAmount(u128::from(transfer.gas_limit).saturating_mul(transfer.max_fee_per_gas));
    Ok(Unsigned { transaction: build::unsigned_bytes(&transfer.tx()), horizon, fee })
}
