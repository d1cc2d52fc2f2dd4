//! Hosted native ETH payments.

use std::time::Duration;

use alloy::primitives::U256;
use alloy::rpc::types::TransactionRequest;
use alloy::signers::local::PrivateKeySigner;
use tollgate_protocol::gateway::SendPaymentRequest;
use tollgate_protocol::{AtomicAmount, ChainFamily, DecimalAmount, ErrorCode};

use super::SendOutcome;
use crate::AppState;
use crate::auth::Caller;
use crate::chains::Target;
use crate::chains::evm::build::{self, TRANSFER_GAS, Transfer};
use crate::chains::evm::{EvmBackend, address};
use crate::error::ApiError;
use crate::settlement::engine::{Settlement, Submitted, submit, wait_for_verdict};
use crate::validate;

fn eth(wei: U256) -> String {
    let wei = u128::try_from(wei).unwrap_or(u128::MAX);
    DecimalAmount::from_atomic(AtomicAmount(wei), ChainFamily::Evm.native_decimals()).to_string()
}

/// Gas and fees of a native transfer: 21,000 gas to an account without code, the node's
/// estimate (within the backend's cap) to a contract; the node's EIP-1559 fees, with the tip
/// spread from `priority_fee` (total wei) when one is given.
///
/// # Errors
/// 400 `INVALID_RECIPIENT` for a contract that refuses the payment or needs too much gas; 502 on
/// chain failures.
async fn transfer_terms(
    backend: &EvmBackend,
    from: alloy::primitives::Address,
    to: alloy::primitives::Address,
    value: U256,
    priority_fee: Option<u128>,
) -> Result<(u64, u128, u128), ApiError> {
    let rpc = &backend.rpc;
    let gas_limit = if rpc.code(to).await?.is_empty() {
        TRANSFER_GAS
    } else {
        let request = TransactionRequest::default().from(from).to(to).value(value);
        rpc.estimate_gas(request)
            .await
            .map_err(|_| ApiError::invalid_recipient("the recipient is a contract that does not accept this payment"))?
    };
    if gas_limit > backend.max_gas {
        return Err(ApiError::invalid_recipient(format!(
            "paying this recipient needs {gas_limit} gas, more than the {} allowed",
            backend.max_gas
        )));
    }
    let fees = rpc.fees().await?;
    let tip = priority_fee.map_or(fees.max_priority_fee_per_gas, |total| total / u128::from(gas_limit));
    let max_fee = fees.max_fee_per_gas.saturating_sub(fees.max_priority_fee_per_gas).saturating_add(tip);
    Ok((gas_limit, max_fee, tip))
}

/// A native transfer a send request asks for, planned but not yet given a nonce.
pub(crate) struct Planned {
    /// Payer, as given.
    pub from: tollgate_protocol::Address,
    /// Recipient, as given.
    pub to: tollgate_protocol::Address,
    /// The payer's key address.
    pub from_key: alloy::primitives::Address,
    /// Wei, exact.
    pub amount: AtomicAmount,
    /// The transfer; [`plan`] prices its gas, the caller sets its nonce.
    pub transfer: Transfer,
}

/// Checks a send request's addresses and amounts (no chain call yet).
///
/// # Errors
/// 400 for non-EVM addresses or bad amounts.
pub(crate) fn parse(req: &SendPaymentRequest) -> Result<(Planned, Option<u128>), ApiError> {
    let from = validate::address("walletAddress", &req.wallet_address)?;
    let to = validate::recipient(&req.recipient_address, &from)?;
    let (Some(from_key), Some(to_key)) = (address(&from), address(&to)) else {
        return Err(ApiError::invalid_recipient("recipientAddress must be an EVM address"));
    };
    let amount = validate::native_amount("amount", &req.amount, ChainFamily::Evm, None)?;
    let priority_fee = match &req.priority_fee {
        Some(f) => Some(validate::native_amount("priorityFee", f, ChainFamily::Evm, None)?.get()),
        None => None,
    };
    let transfer = Transfer {
        chain_id: 0,
        nonce: 0,
        to: to_key,
        value: U256::from(amount.get()),
        gas_limit: 0,
        max_fee_per_gas: 0,
        max_priority_fee_per_gas: 0,
    };
    Ok((Planned { from, to, from_key, amount, transfer }, priority_fee))
}

/// Prices a parsed transfer's gas on `backend`'s chain (the nonce stays for the caller to set).
///
/// # Errors
/// `INVALID_RECIPIENT` for a contract that refuses the payment; 502 on chain failures.
pub(crate) async fn plan(
    backend: &EvmBackend,
    (planned, priority_fee): (Planned, Option<u128>),
) -> Result<Planned, ApiError> {
    let t = planned.transfer;
    let (gas_limit, max_fee_per_gas, max_priority_fee_per_gas) =
        transfer_terms(backend, planned.from_key, t.to, t.value, priority_fee).await?;
    let transfer =
        Transfer { chain_id: backend.rpc.chain_id(), gas_limit, max_fee_per_gas, max_priority_fee_per_gas, ..t };
    Ok(Planned { transfer, ..planned })
}

/// Pays `req.amount` ETH from a custodial wallet to `req.recipientAddress` and waits for the
/// verdict within the configured budget. The wallet's nonce is held from reading it until the
/// broadcast, so concurrent sends from one wallet take consecutive nonces.
///
/// # Errors
/// 403 for a wallet that is not the caller's, 402 `INSUFFICIENT_BALANCE`, 400 `INVALID_RECIPIENT`,
/// 502 for chain failures or a failed transaction.
pub async fn send(
    state: &AppState,
    caller: &Caller,
    req: &SendPaymentRequest,
    target: &Target,
) -> Result<SendOutcome, ApiError> {
    let backend = state.chains.evm(target)?;
    let rpc = &backend.rpc;
    let parsed = parse(req)?;
    let secret = super::custodial_secret(state, caller, &parsed.0.from, ChainFamily::Evm).await?;
    let signer = PrivateKeySigner::from_slice(&secret)
        .map_err(|_| ApiError::internal("stored wallet key is not a secp256k1 key"))?;
    let Planned { from, to, from_key, amount, transfer } = plan(&backend, parsed).await?;
    let lease = backend.nonces.lease(rpc, from_key).await?;
    let transfer = Transfer { nonce: lease.nonce(), ..transfer };
    let value = transfer.value;
    let balance = rpc.balance(from_key).await?;
    if balance < transfer.max_cost() {
        return Err(ApiError::new(
            ErrorCode::InsufficientBalance,
            format!(
                "the wallet holds {} ETH; the payment needs up to {} ETH ({} + at most {} fee)",
                eth(balance),
                eth(transfer.max_cost()),
                eth(value),
                eth(transfer.max_cost() - value)
            ),
        ));
    }
    let (tx_bytes, hash) = build::sign(transfer.tx(), &signer).map_err(ApiError::internal)?;
    let tx_id = format!("{hash:#x}");
    let recipient_account =
        state.store.get_wallet(&to.to_string()).await.map_err(ApiError::internal)?.map(|w| w.account_id);
    let max_fee = AtomicAmount(u128::from(transfer.gas_limit).saturating_mul(transfer.max_fee_per_gas));
    let payment = crate::store::NewPayment {
        counterparty_account: recipient_account,
        ..super::native_payment(caller, rpc.network(), (&from, &to), amount, max_fee, req, state.clock.now())
    };
    let wait = Duration::from_secs(state.config.limits.send_wait_secs);
    let settlement = Settlement { payment, tx_id: tx_id.clone(), tx_bytes, wait };
    let submitted = submit(&*state.store, &*state.clock, rpc, &settlement).await.map_err(ApiError::internal)?;
    let stored = match submitted {
        Submitted::Refused(failed) => *failed, // the lease is dropped unused: the next one asks the node
        Submitted::Broadcast => {
            lease.used();
            wait_for_verdict(&*state.store, &*state.clock, rpc, &settlement.payment.id, &tx_id, wait)
                .await
                .map_err(ApiError::internal)?
        }
    };
    super::send_outcome(&stored, || {
        build::signed_receipt(&signer, rpc.network(), &tx_id, &to, req.resource.as_deref()).map_err(ApiError::internal)
    })
}
