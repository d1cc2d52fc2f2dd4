//! Local-mode native SOL payments.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use chrono::Duration;
use solana_sdk::signature::Signature;
use solana_sdk::transaction::Transaction;
use tollgate_protocol::gateway::{PaymentMode, PaymentStatus, SendPaymentRequest, UnsignedTransaction};
use tollgate_protocol::{AtomicAmount, ChainFamily, DecimalAmount, ErrorCode};

use crate::AppState;
use crate::auth::Caller;
use crate::chains::Target;
use crate::chains::solana::build::{Transfer, pubkey};
use crate::chains::solana::verify;
use crate::error::ApiError;
use crate::hosted::solana::{send_lamports, sol_payment};
use crate::settlement::state::ExpiryEvidence;
use crate::settlement::{Event, advance};
use crate::store::{NewPayment, StoredPayment};
use crate::validate;

/// How long an unsigned transaction is offered for (the chain's own limit, ~150 blocks, is
/// about as long).
pub const VALIDITY: Duration = Duration::seconds(60);

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
        ..sol_payment(caller, rpc.network(), (&from, &to), amount, fee, req, now)
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

/// Checks a reported transaction against a `built` payment on chain and records what it finds:
/// `confirmed` / `failed` when the chain has it, `expired` when the chain is past the horizon
/// without it, unchanged otherwise.
///
/// # Errors
/// 400 when the transaction does not pay this payment or was reported for another one; 502 on
/// chain failures.
pub async fn confirm(state: &AppState, payment: StoredPayment, transaction: &str) -> Result<StoredPayment, ApiError> {
    if payment.payment.status.is_final() {
        return Ok(payment);
    }
    let p = &payment.payment;
    let backend = state.chains.solana(&Target::Network(p.network.clone()))?;
    let rpc = &backend.rpc;
    let signature: Signature =
        transaction.parse().map_err(|_| ApiError::invalid_params("transaction must be a Solana signature"))?;
    let now = || state.clock.now();
    let Some(seen) = rpc.confirmed_transaction(&signature).await? else {
        let height = rpc.block_height().await?;
        if p.status == PaymentStatus::Built && p.last_valid_block_height.is_some_and(|last| height > last) {
            let reason = format!("block height {height} passed the transaction's last valid height without it");
            let event = Event::Expire { evidence: ExpiryEvidence::Chain, reason };
            return advance(&*state.store, &p.id, &event, now()).await.map_err(ApiError::internal);
        }
        // Not on chain (yet): nothing to record.
        return Ok(payment);
    };
    let (from, to) = match (p.from.parse(), p.to.parse()) {
        (Ok(f), Ok(t)) => (f, t),
        _ => return Err(ApiError::internal("stored payment has unreadable addresses")),
    };
    let paid = verify::transferred(&seen.transaction, &from, &to);
    if u128::from(paid) < p.amount_atomic.get() {
        return Err(ApiError::invalid_params(
            "that transaction does not pay this payment (payer, recipient or amount differ)",
        ));
    }
    // One transaction settles one payment.
    let proof = format!("{}:{signature}", p.network);
    if !state.store.claim_proof(&proof, &p.id, now()).await.map_err(ApiError::internal)? {
        let holder = state.store.proof_claim(&proof).await.map_err(ApiError::internal)?;
        if holder.as_deref() != Some(&p.id) {
            return Err(ApiError::invalid_params("that transaction was already reported for another payment"));
        }
    }
    let mut current = payment;
    if current.payment.status == PaymentStatus::Built {
        current =
            advance(&*state.store, &current.payment.id, &Event::Submit { transaction: signature.to_string() }, now())
                .await
                .map_err(ApiError::internal)?;
    }
    let event = match seen.error {
        None => Event::Confirm { fee: seen.fee.map(AtomicAmount::from) },
        Some(reason) => Event::Fail { reason },
    };
    advance(&*state.store, &current.payment.id, &event, now()).await.map_err(ApiError::internal)
}
