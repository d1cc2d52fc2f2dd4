//! Hosted native SOL payments.

use std::time::Duration;

use solana_sdk::signature::Keypair;
use solana_sdk::signer::Signer as _;
use solana_sdk::transaction::Transaction;
use tollgate_protocol::gateway::SendPaymentRequest;
use tollgate_protocol::{Address, AtomicAmount, ChainFamily, DecimalAmount, ErrorCode};

use super::SendOutcome;
use crate::AppState;
use crate::auth::Caller;
use crate::chains::Target;
use crate::chains::solana::build::{Transfer, pubkey, signed_receipt};
use crate::chains::solana::rpc::tx_id;
use crate::error::ApiError;
use crate::settlement::engine::{Settlement, settle};
use crate::store::NewPayment;
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

/// The keypair of one of the caller's custodial Solana wallets.
///
/// # Errors
/// 403 `FORBIDDEN` when the address is not a custodial Solana wallet of the caller's account.
pub async fn custodial_keypair(state: &AppState, caller: &Caller, address: &Address) -> Result<Keypair, ApiError> {
    let secret = super::custodial_secret(state, caller, address, ChainFamily::Solana).await?;
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
        ..super::native_payment(
            caller,
            rpc.network(),
            (&from, &to),
            amount,
            AtomicAmount::from(fee),
            req,
            state.clock.now(),
        )
    };
    let wait = Duration::from_secs(state.config.limits.send_wait_secs);
    let settlement = Settlement { payment, tx_id: signature.clone(), tx_bytes, wait };
    let stored = settle(&*state.store, &*state.clock, rpc, settlement).await.map_err(ApiError::internal)?;
    super::send_outcome(&stored, || {
        signed_receipt(&keypair, rpc.network(), &signature, &to, req.resource.as_deref()).map_err(ApiError::internal)
    })
}
