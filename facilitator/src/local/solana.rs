//! Local-mode native SOL payments.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use solana_sdk::signature::Signature;
use solana_sdk::transaction::{Transaction, VersionedTransaction};
use tollgate_protocol::gateway::{
    LocalReceiveRequest, PaymentMode, PaymentStatus, SendPaymentRequest, UnsignedTransaction,
};
use tollgate_protocol::{AtomicAmount, ChainFamily, DecimalAmount, ErrorCode};

use super::{Seen, VALIDITY};
use crate::AppState;
use crate::auth::Caller;
use crate::chains::Target;
use crate::chains::solana::build::{Transfer, pubkey};
use crate::chains::solana::{spl, verify};
use crate::error::ApiError;
use crate::hosted::native_payment;
use crate::hosted::solana::send_lamports;
use crate::proofs::solana::FeePayer;
use crate::proofs::{self, Price, Settle, Terms};
use crate::settlement::engine::SettleError;
use crate::store::NewPayment;
use crate::validate;

/// Builds an unsigned transfer for the caller to sign, and records it as a `built` payment.
///
/// # Errors
/// 402 `INSUFFICIENT_BALANCE` when the wallet cannot pay amount plus fee; 502 on chain failures.
pub async fn build(
    state: &AppState,
    caller: &Caller,
    req: &SendPaymentRequest,
    target: &Target,
) -> Result<UnsignedTransaction, ApiError> {
    let backend = state.chains.solana(target)?;
    let rpc = &backend.rpc;
    let from = validate::address("walletAddress", &req.wallet_address)?;
    let to = validate::recipient(&req.recipient_address, &from)?;
    let (from_key, to_key) = (pubkey(&from), pubkey(&to));
    let (Some(from_key), Some(to_key)) = (from_key, to_key) else {
        return Err(ApiError::invalid_params("addresses must be Solana addresses"));
    };
    let (amount, lamports, priority_fee) = send_lamports(req)?;

    let (blockhash, last_valid_block_height) = rpc.latest_blockhash().await?;
    let message = Transfer { from: from_key, to: to_key, lamports, priority_fee }.message(&blockhash);
    let fee = rpc.fee_for(&message).await?;
    let balance = rpc.balance(&from_key).await?;
    if balance < lamports.saturating_add(fee) {
        return Err(ApiError::new(
            ErrorCode::InsufficientBalance,
            "the wallet cannot pay the amount plus the network fee",
        ));
    }
    let unsigned = Transaction::new_unsigned(message);
    let now = state.clock.now();
    let expires_at = now + VALIDITY;
    let payment = NewPayment {
        status: PaymentStatus::Built,
        mode: PaymentMode::Local,
        expires_at: Some(expires_at),
        last_valid_block_height: Some(last_valid_block_height),
        ..native_payment(caller, rpc.network(), (&from, &to), amount, AtomicAmount::from(fee), req, now)
    };
    state.store.insert_payment(&payment).await.map_err(ApiError::internal)?;
    Ok(UnsignedTransaction {
        payment_id: payment.id,
        transaction: STANDARD.encode(bincode::serialize(&unsigned).map_err(ApiError::internal)?),
        encoding: "base64".into(),
        network: rpc.network().clone(),
        last_valid_block_height,
        expires_at: expires_at.timestamp(),
        estimated_fee: DecimalAmount::from_atomic(AtomicAmount::from(fee), ChainFamily::Solana.native_decimals()),
        payer: None,
        amount: None,
    })
}

/// Fee per signature on every Solana cluster, lamports.
const LAMPORTS_PER_SIGNATURE: u64 = 5_000;

/// Verifies a buyer's proof for the seller's `walletAddress` and returns the transaction that
/// settles it, recorded as a `built` payment (the proof is claimed: it settles once):
///
/// * an x402 `exact` SPL transfer whose fee payer is `walletAddress` — the seller signs it as fee
///   payer and broadcasts it; `priorityFee`, when given, caps the priority fee it will pay;
/// * an `exact-native` signed transfer — complete already; the seller broadcasts it.
///
/// Receipts are for transfers already on chain and go to `/payment/receive`.
///
/// # Errors
/// 402 `INVALID_PAYMENT_PROOF` for a proof that does not pay as required or was used before;
/// 502 when the chain cannot be asked.
pub async fn receive(
    state: &AppState,
    caller: &Caller,
    req: &LocalReceiveRequest,
    target: &Target,
) -> Result<UnsignedTransaction, ApiError> {
    let backend = state.chains.solana(target)?;
    let wallet = validate::address("walletAddress", &req.wallet_address)?;
    let seller = pubkey(&wallet).ok_or_else(|| ApiError::invalid_params("walletAddress must be a Solana address"))?;
    let terms = Terms {
        pay_to: wallet,
        asset: None,
        price: Price::AtLeast(req.expected_amount.clone()),
        resource: req.resource.clone(),
        extra: None,
    };
    let payload = validate::payment_proof(&req.payment_proof)?;
    if let Some(payment_id) = proofs::claimed_by(state, &payload, None).await.map_err(ApiError::internal)? {
        return Err(SettleError::AlreadyClaimed { payment_id }.into());
    }
    let checked = proofs::solana::check(&backend, &payload, &terms, FeePayer::Seller(seller)).await?;
    let Settle::Transaction { bytes, horizon, complete, .. } = &checked.settle else {
        return Err(ApiError::internal("a local receive checked a receipt"));
    };
    let tx: VersionedTransaction = bincode::deserialize(bytes).map_err(ApiError::internal)?;
    let fee = u64::try_from(checked.fee.unwrap_or_default()).unwrap_or(u64::MAX);
    if let Some(cap) = &req.priority_fee
        && !complete
    {
        let cap = lamports_of(cap)?;
        let signatures = u64::from(tx.message.header().num_required_signatures);
        let priority = fee.saturating_sub(signatures.saturating_mul(LAMPORTS_PER_SIGNATURE));
        if priority > cap {
            return Err(ApiError::new(
                ErrorCode::InvalidPaymentProof,
                format!("the transaction's priority fee is {priority} lamports, above the priorityFee of {cap}"),
            ));
        }
    }
    let expires_at = state.clock.now() + VALIDITY;
    let payment =
        proofs::record_for_seller(state, &caller.account_id, backend.rpc.network(), &checked, &terms, expires_at)
            .await?;
    let native = ChainFamily::Solana.native_decimals();
    Ok(UnsignedTransaction {
        payment_id: payment.id,
        transaction: STANDARD.encode(bytes),
        encoding: "base64".into(),
        network: backend.rpc.network().clone(),
        last_valid_block_height: horizon.unwrap_or_default(),
        expires_at: expires_at.timestamp(),
        estimated_fee: DecimalAmount::from_atomic(AtomicAmount::from(fee), native),
        payer: Some(checked.payer.to_string()),
        amount: Some(DecimalAmount::from_atomic(AtomicAmount(checked.amount), checked.decimals)),
    })
}

fn lamports_of(amount: &DecimalAmount) -> Result<u64, ApiError> {
    let atomic = amount
        .to_atomic(ChainFamily::Solana.native_decimals())
        .map_err(|_| ApiError::invalid_params("priorityFee has more decimals than SOL"))?;
    u64::try_from(atomic.get()).map_err(|_| ApiError::invalid_params("priorityFee is too large"))
}

/// What the Solana chain says about a transaction reported for `p`.
///
/// # Errors
/// 400 for a malformed signature; 502 on chain failures.
pub async fn observe(state: &AppState, p: &NewPayment, transaction: &str) -> Result<(String, Seen), ApiError> {
    let backend = state.chains.solana(&Target::Network(p.network.clone()))?;
    let rpc = &backend.rpc;
    let signature: Signature =
        transaction.parse().map_err(|_| ApiError::invalid_params("transaction must be a Solana signature"))?;
    let Some(seen) = rpc.confirmed_transaction(&signature).await? else {
        let height = rpc.block_height().await?;
        return Ok((signature.to_string(), Seen::Absent { height }));
    };
    let (from, to) = match (p.from.parse(), p.to.parse()) {
        (Ok(f), Ok(t)) => (f, t),
        _ => return Err(ApiError::internal("stored payment has unreadable addresses")),
    };
    let paid = if p.asset == "native" {
        verify::transferred(&seen.transaction, &from, &to)
    } else {
        let mint = p.asset.parse().map_err(|_| ApiError::internal("stored payment has an unreadable mint"))?;
        spl::token_transferred(&seen.transaction, &mint, &from, &to)
    };
    let landed = Seen::Landed {
        pays: u128::from(paid) >= p.amount_atomic.get(),
        error: seen.error,
        fee: seen.fee.map(AtomicAmount::from),
    };
    Ok((signature.to_string(), landed))
}
