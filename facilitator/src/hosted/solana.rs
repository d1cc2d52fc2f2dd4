//! Hosted native SOL payments.

use std::time::Duration;

use solana_sdk::signature::Keypair;
use solana_sdk::signer::Signer as _;
use solana_sdk::transaction::Transaction;
use tollgate_protocol::gateway::{PaymentMode, PaymentStatus, ReceivePaymentRequest, SendPaymentRequest};
use tollgate_protocol::{Address, AtomicAmount, ChainFamily, DecimalAmount, ErrorCode};

use super::SendOutcome;
use crate::AppState;
use crate::auth::Caller;
use crate::chains::Target;
use crate::chains::solana::build::{Transfer, pubkey, signed_receipt};
use crate::chains::solana::rpc::tx_id;
use crate::error::ApiError;
use crate::proofs::solana::FeePayer;
use crate::proofs::{self, Price, Terms};
use crate::settlement::engine::{SettleError, Settlement, settle};
use crate::store::{NewPayment, StoredPayment};
use crate::validate;

fn lamports(amount: AtomicAmount, field: &str) -> Result<u64, ApiError> {
    u64::try_from(amount.get()).map_err(|_| ApiError::invalid_params(format!("{field} is too large")))
}

fn sol(lamports: u64) -> String {
    DecimalAmount::from_atomic(AtomicAmount::from(lamports), ChainFamily::Solana.native_decimals()).to_string()
}

/// A send request's amount (atomic), the same in lamports, and its priority fee in lamports.
///
/// # Errors
/// 400 `INVALID_PARAMETERS` for amounts that are not exact in lamports.
pub(crate) fn send_lamports(req: &SendPaymentRequest) -> Result<(AtomicAmount, u64, Option<u64>), ApiError> {
    let amount = validate::native_amount("amount", &req.amount, ChainFamily::Solana, None)?;
    let priority_fee = match &req.priority_fee {
        Some(f) => {
            Some(lamports(validate::native_amount("priorityFee", f, ChainFamily::Solana, None)?, "priorityFee")?)
        }
        None => None,
    };
    Ok((amount, lamports(amount, "amount")?, priority_fee))
}

/// A native SOL payment by the caller as hosted mode records it (`verified`); local mode
/// overrides status, mode and expiry.
pub(crate) fn sol_payment(
    caller: &Caller,
    network: &tollgate_protocol::Network,
    (from, to): (&Address, &Address),
    amount: AtomicAmount,
    fee: u64,
    req: &SendPaymentRequest,
    now: chrono::DateTime<chrono::Utc>,
) -> NewPayment {
    NewPayment {
        id: format!("pay_{}", ulid::Ulid::new()),
        owner_account: caller.account_id.clone(),
        counterparty_account: None,
        status: PaymentStatus::Verified,
        mode: PaymentMode::Hosted,
        network: network.clone(),
        from: from.to_string(),
        to: to.to_string(),
        amount_atomic: amount,
        asset: "native".into(),
        decimals: ChainFamily::Solana.native_decimals(),
        fee_atomic: Some(AtomicAmount::from(fee)),
        transaction: None,
        resource: req.resource.clone(),
        metadata: req.metadata.clone(),
        proof_id: None,
        expires_at: None,
        last_valid_block_height: None,
        created_at: now,
    }
}

/// The keypair of one of the caller's custodial Solana wallets.
///
/// # Errors
/// 403 `FORBIDDEN` when the address is not a custodial wallet of the caller's account.
pub async fn custodial_keypair(state: &AppState, caller: &Caller, address: &Address) -> Result<Keypair, ApiError> {
    let wallet = state.store.get_wallet(&address.to_string()).await.map_err(ApiError::internal)?;
    let wallet =
        wallet.filter(|w| w.account_id == caller.account_id && w.family == ChainFamily::Solana).ok_or_else(|| {
            ApiError::forbidden("walletAddress is not a custodial wallet of this account")
                .with_remedy("Create one with `tollgate-facilitator wallets create`")
        })?;
    let master = state
        .master_key
        .as_ref()
        .ok_or_else(|| ApiError::verification_failed("custodial wallets are disabled: no master key is configured"))?;
    let secret = master.open(&wallet.address, &wallet.sealed_secret).map_err(ApiError::internal)?;
    Keypair::try_from(secret.as_slice()).map_err(|_| ApiError::internal("stored wallet key is not a Solana keypair"))
}

/// Pays `req.amount` SOL from a custodial wallet to `req.recipientAddress` and waits for the
/// verdict within the configured budget.
///
/// # Errors
/// 403 for a wallet that is not the caller's, 402 `INSUFFICIENT_BALANCE`, 400 `INVALID_RECIPIENT`
/// for an amount a new account cannot hold, 502 for chain failures or a failed transaction.
pub async fn send(
    state: &AppState,
    caller: &Caller,
    req: &SendPaymentRequest,
    target: &Target,
) -> Result<SendOutcome, ApiError> {
    let backend = state.chains.solana(target)?;
    let rpc = &backend.rpc;
    let from = validate::address("walletAddress", &req.wallet_address)?;
    let to = validate::recipient(&req.recipient_address, &from)?;
    let (amount, lamports_out, priority_fee) = send_lamports(req)?;
    let keypair = custodial_keypair(state, caller, &from).await?;
    let (from_key, to_key) = (
        keypair.pubkey(),
        pubkey(&to).ok_or_else(|| ApiError::invalid_recipient("recipientAddress must be a Solana address"))?,
    );

    let (blockhash, last_valid_block_height) = rpc.latest_blockhash().await?;
    let message = Transfer { from: from_key, to: to_key, lamports: lamports_out, priority_fee }.message(&blockhash);
    let fee = rpc.fee_for(&message).await?;
    let balance = rpc.balance(&from_key).await?;
    let rent_minimum = rpc.rent_exempt_minimum().await?;
    let needed = lamports_out.saturating_add(fee);
    if balance < needed {
        return Err(ApiError::new(
            ErrorCode::InsufficientBalance,
            format!(
                "the wallet holds {} SOL; the payment needs {} SOL ({} + {} fee)",
                sol(balance),
                sol(needed),
                sol(lamports_out),
                sol(fee)
            ),
        ));
    }
    let left = balance - needed;
    if left > 0 && left < rent_minimum {
        return Err(ApiError::new(
            ErrorCode::InsufficientBalance,
            format!(
                "the payment would leave {} SOL, below the {} SOL a Solana account must keep (send everything or less)",
                sol(left),
                sol(rent_minimum)
            ),
        ));
    }
    if rpc.balance(&to_key).await? == 0 && lamports_out < rent_minimum {
        return Err(ApiError::invalid_recipient(format!(
            "a new Solana account must receive at least {} SOL",
            sol(rent_minimum)
        )));
    }

    let tx = Transaction::new(&[&keypair], message, blockhash);
    let signature = tx_id(&tx);
    let tx_bytes = bincode::serialize(&tx).map_err(ApiError::internal)?;
    let recipient_account =
        state.store.get_wallet(&to.to_string()).await.map_err(ApiError::internal)?.map(|w| w.account_id);
    // The facilitator built and signed this transaction itself: there is no buyer proof to
    // claim. Its receipt, presented to a seller, is claimed there.
    let payment = NewPayment {
        counterparty_account: recipient_account,
        last_valid_block_height: Some(last_valid_block_height),
        ..sol_payment(caller, rpc.network(), (&from, &to), amount, fee, req, state.clock.now())
    };
    let wait = Duration::from_secs(state.config.limits.send_wait_secs);
    let settlement = Settlement { payment, tx_id: signature.clone(), tx_bytes, wait };
    let stored = settle(&*state.store, &*state.clock, rpc, settlement).await.map_err(ApiError::internal)?;
    let mut record = stored.to_record();
    match record.status {
        PaymentStatus::Confirmed => {
            let proof = signed_receipt(&keypair, rpc.network(), &signature, &to, req.resource.as_deref())
                .map_err(ApiError::internal)?;
            record.payment_proof = Some(proof);
            Ok(SendOutcome::Confirmed(record))
        }
        PaymentStatus::Failed => Err(ApiError::verification_failed(format!(
            "the transaction failed on chain: {} (payment {})",
            record.error.as_deref().unwrap_or("unknown reason"),
            record.payment_id
        ))),
        _ => Ok(SendOutcome::Pending(record)),
    }
}

/// Verifies and settles an incoming payment to `walletAddress`: an `exact-native` signed
/// transfer (checked, then broadcast once) or receipt (checked against the chain), or an x402
/// `exact` SPL transfer the facilitator's fee payer sponsors.
///
/// # Errors
/// 402 `INVALID_PAYMENT_PROOF` for a proof that does not pay as required or was used before;
/// 502 when the chain cannot be asked.
pub async fn receive(
    state: &AppState,
    caller: &Caller,
    req: &ReceivePaymentRequest,
    target: &Target,
) -> Result<SendOutcome, ApiError> {
    let backend = state.chains.solana(target)?;
    let terms = Terms {
        pay_to: validate::address("walletAddress", &req.wallet_address)?,
        asset: None,
        price: Price::AtLeast(req.expected_amount.clone()),
        resource: req.resource.clone(),
    };
    let payload = validate::payment_proof(&req.payment_proof)?;
    if let Some(payment_id) = proofs::solana::claimed_by(state, &payload).await.map_err(ApiError::internal)? {
        return receive_outcome(state, caller, Err(SettleError::AlreadyClaimed { payment_id })).await;
    }
    let checked = proofs::solana::check(&backend, &payload, &terms, FeePayer::Facilitator).await?;
    let wait = Duration::from_secs(req.timeout.unwrap_or(validate::DEFAULT_TIMEOUT_SECS));
    let settled = proofs::solana::settle(state, &caller.account_id, &backend.rpc, checked, &terms, wait).await;
    receive_outcome(state, caller, settled).await
}

/// The answer to a receive: the record (200 confirmed, 202 pending), or why the proof is refused.
/// A proof claimed before answers with its payment while that payment is still settling and
/// belongs to the caller (the stored outcome), and is refused as used otherwise.
///
/// # Errors
/// 402 `INVALID_PAYMENT_PROOF` for a used proof or a transaction that failed on chain.
pub async fn receive_outcome(
    state: &AppState,
    caller: &Caller,
    settled: Result<StoredPayment, SettleError>,
) -> Result<SendOutcome, ApiError> {
    let invalid = |message: String| ApiError::new(ErrorCode::InvalidPaymentProof, message);
    let stored = match settled {
        Ok(s) => s,
        Err(SettleError::AlreadyClaimed { payment_id }) => {
            let holder = state.store.get_payment(&payment_id).await.map_err(ApiError::internal)?;
            match holder {
                Some(p) if p.visible_to(&caller.account_id) && !p.payment.status.is_final() => p,
                _ => return Err(invalid(format!("proof already used (payment {payment_id})"))),
            }
        }
        Err(e) => return Err(ApiError::internal(e)),
    };
    let mut record = stored.to_record();
    record.payer = Some(record.from.clone());
    match record.status {
        PaymentStatus::Confirmed => Ok(SendOutcome::Confirmed(record)),
        PaymentStatus::Failed => Err(invalid(format!(
            "the transaction failed on chain: {} (payment {})",
            record.error.as_deref().unwrap_or("unknown reason"),
            record.payment_id
        ))),
        _ => Ok(SendOutcome::Pending(record)),
    }
}
