//! Local-mode native ETH payments.

use alloy::primitives::{B256, U256};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use tollgate_protocol::gateway::{
    LocalReceiveRequest, PaymentMode, PaymentStatus, SendPaymentRequest, UnsignedTransaction,
};
use tollgate_protocol::{AtomicAmount, ChainFamily, DecimalAmount, ErrorCode};

use super::{Seen, VALIDITY};
use crate::AppState;
use crate::auth::Caller;
use crate::chains::Target;
use crate::chains::evm::address;
use crate::chains::evm::build::{Transfer, unsigned_bytes};
use crate::error::ApiError;
use crate::hosted::evm::{Planned, parse, plan};
use crate::hosted::native_payment;
use crate::proofs::evm::Submitter;
use crate::proofs::{self, Price, Settle, Terms};
use crate::settlement::engine::SettleError;
use crate::store::NewPayment;
use crate::validate;

/// Blocks after building during which a local-mode transaction is expected to land; past them
/// (with `expiresAt`, 60 s) the service treats it as expired when the chain does not have it.
pub const HORIZON_BLOCKS: u64 = 50;

fn wei_to_eth(wei: u128) -> DecimalAmount {
    DecimalAmount::from_atomic(AtomicAmount(wei), ChainFamily::Evm.native_decimals())
}

/// Builds an unsigned EIP-1559 transfer for the caller to sign (its signing payload,
/// `0x02 || rlp([...])`, base64), and records it as a `built` payment.
///
/// # Errors
/// 402 `INSUFFICIENT_BALANCE` when the wallet cannot pay value plus the most gas can cost; 400
/// `INVALID_RECIPIENT` for a contract that refuses the payment; 502 on chain failures.
pub async fn build(
    state: &AppState,
    caller: &Caller,
    req: &SendPaymentRequest,
    target: &Target,
) -> Result<UnsignedTransaction, ApiError> {
    let backend = state.chains.evm(target)?;
    let rpc = &backend.rpc;
    let Planned { from, to, from_key, amount, transfer } = plan(&backend, parse(req)?).await?;
    let transfer = Transfer { nonce: rpc.pending_nonce(from_key).await?, ..transfer };
    if rpc.balance(from_key).await? < transfer.max_cost() {
        return Err(ApiError::new(
            ErrorCode::InsufficientBalance,
            "the wallet cannot pay the amount plus the most the gas can cost",
        ));
    }
    let horizon = rpc.block_number().await?.saturating_add(HORIZON_BLOCKS);
    let now = state.clock.now();
    let expires_at = now + VALIDITY;
    let max_fee = u128::from(transfer.gas_limit).saturating_mul(transfer.max_fee_per_gas);
    let payment = NewPayment {
        status: PaymentStatus::Built,
        mode: PaymentMode::Local,
        expires_at: Some(expires_at),
        last_valid_block_height: Some(horizon),
        ..native_payment(caller, rpc.network(), (&from, &to), amount, AtomicAmount(max_fee), req, now)
    };
    state.store.insert_payment(&payment).await.map_err(ApiError::internal)?;
    Ok(UnsignedTransaction {
        payment_id: payment.id,
        transaction: STANDARD.encode(unsigned_bytes(&transfer.tx())),
        encoding: "base64".into(),
        network: rpc.network().clone(),
        last_valid_block_height: horizon,
        expires_at: expires_at.timestamp(),
        estimated_fee: wei_to_eth(max_fee),
        payer: None,
        amount: None,
    })
}

/// Verifies a buyer's proof for the seller's `walletAddress` and returns what settles it,
/// recorded as a `built` payment with the proof claimed:
///
/// * an `exact-native` signed transfer: returned as is (base64 of its EIP-2718 bytes) for the
///   seller to broadcast;
/// * an x402 `exact` EIP-3009 authorization: an unsigned EIP-1559 transaction from the seller's
///   account calling `transferWithAuthorization` (its signing payload, base64), simulated from
///   that account.
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
    let backend = state.chains.evm(target)?;
    let rpc = &backend.rpc;
    let terms = Terms {
        pay_to: validate::address("walletAddress", &req.wallet_address)?,
        asset: None,
        price: Price::AtLeast(req.expected_amount.clone()),
        resource: req.resource.clone(),
        extra: None,
    };
    let payload = validate::payment_proof(&req.payment_proof)?;
    if let Some(payment_id) = proofs::claimed_by(state, &payload, None).await.map_err(ApiError::internal)? {
        return Err(SettleError::AlreadyClaimed { payment_id }.into());
    }
    let seller =
        address(&terms.pay_to).ok_or_else(|| ApiError::invalid_params("walletAddress must be an EVM address"))?;
    let now = state.clock.now().timestamp();
    let checked = proofs::evm::check_for(&backend, &payload, &terms, now, Submitter::Seller(seller)).await?;
    let (raw, fee) = match &checked.settle {
        // Signed already: the seller broadcasts it as it is.
        Settle::Transaction { bytes, .. } => (bytes.clone(), 0),
        // An EIP-3009 authorization: the seller sends the call from its own account.
        Settle::Call { to, data, gas_limit } => {
            let token = address(to).ok_or_else(|| ApiError::internal("the call's target is not an EVM address"))?;
            let fees = rpc.fees().await?;
            let tx = alloy::consensus::TxEip1559 {
                chain_id: rpc.chain_id(),
                nonce: rpc.pending_nonce(seller).await?,
                gas_limit: *gas_limit,
                max_fee_per_gas: fees.max_fee_per_gas,
                max_priority_fee_per_gas: fees.max_priority_fee_per_gas,
                to: alloy::primitives::TxKind::Call(token),
                value: U256::ZERO,
                access_list: Default::default(),
                input: data.clone().into(),
            };
            (unsigned_bytes(&tx), u128::from(*gas_limit).saturating_mul(fees.max_fee_per_gas))
        }
        Settle::Confirmed { .. } => {
            return Err(ApiError::new(
                ErrorCode::InvalidPaymentProof,
                "a receipt is for a transfer already on chain: present it to /payment/receive",
            ));
        }
    };
    let horizon = rpc.block_number().await?.saturating_add(HORIZON_BLOCKS);
    let expires_at = state.clock.now() + VALIDITY;
    let checked = proofs::Checked {
        settle: Settle::Transaction {
            bytes: raw.clone(),
            tx_id: String::new(),
            complete: true,
            horizon: Some(horizon),
        },
        ..checked
    };
    let payment =
        proofs::record_for_seller(state, &caller.account_id, rpc.network(), &checked, &terms, expires_at).await?;
    Ok(UnsignedTransaction {
        payment_id: payment.id,
        transaction: STANDARD.encode(&raw),
        encoding: "base64".into(),
        network: rpc.network().clone(),
        last_valid_block_height: horizon,
        expires_at: expires_at.timestamp(),
        estimated_fee: wei_to_eth(fee),
        payer: Some(checked.payer.to_string()),
        amount: Some(DecimalAmount::from_atomic(AtomicAmount(checked.amount), checked.decimals)),
    })
}

/// What the EVM chain says about a transaction reported for `p`.
///
/// # Errors
/// 400 for a malformed hash; 502 on chain failures.
pub async fn observe(state: &AppState, p: &NewPayment, transaction: &str) -> Result<(String, Seen), ApiError> {
    let backend = state.chains.evm(&Target::Network(p.network.clone()))?;
    let rpc = &backend.rpc;
    let hash: B256 = transaction
        .parse()
        .map_err(|_| ApiError::invalid_params("transaction must be a transaction hash (0x + 64 hex digits)"))?;
    let tx_id = format!("{hash:#x}");
    let Some(mined) = rpc.mined(hash).await? else {
        return Ok((tx_id, Seen::Absent { height: rpc.block_number().await? }));
    };
    let (from, to) = match (p.from.parse::<alloy::primitives::Address>(), p.to.parse::<alloy::primitives::Address>()) {
        (Ok(f), Ok(t)) => (f, t),
        _ => return Err(ApiError::internal("stored payment has unreadable addresses")),
    };
    let pays = if p.asset == "native" {
        mined.from == from
            && mined.to == Some(to)
            && mined.input.is_empty()
            && u128::try_from(mined.value).is_ok_and(|v| v >= p.amount_atomic.get())
    } else {
        // A token payment (EIP-3009, sent by anyone): the token's Transfer event from the payer.
        let token = p.asset.parse::<alloy::primitives::Address>().ok();
        let paid = mined
            .token_transfers
            .iter()
            .filter(|(t, f, r, _)| Some(*t) == token && *f == from && *r == to)
            .map(|(_, _, _, v)| *v)
            .fold(U256::ZERO, U256::saturating_add);
        u128::try_from(paid).is_ok_and(|v| v >= p.amount_atomic.get())
    };
    let error = (!mined.success).then(|| "the transaction reverted".to_owned());
    Ok((tx_id, Seen::Landed { pays, error, fee: Some(AtomicAmount(mined.fee)) }))
}
