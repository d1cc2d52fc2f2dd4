//! Hosted native SOL payments.

use std::time::Duration;

use solana_sdk::message::VersionedMessage;
use solana_sdk::pubkey::Pubkey;
use solana_sdk::signature::{Keypair, Signature};
use solana_sdk::signer::Signer as _;
use solana_sdk::transaction::Transaction;
use tollgate_protocol::gateway::{PaymentMode, PaymentStatus, ReceivePaymentRequest, SendPaymentRequest};
use tollgate_protocol::x402::schemes::{ExactNativePayload, NativeReceipt, receipt_message};
use tollgate_protocol::x402::{Asset, PaymentPayload, SCHEME_EXACT, SCHEME_EXACT_NATIVE};
use tollgate_protocol::{Address, AtomicAmount, ChainFamily, DecimalAmount, ErrorCode};

use super::SendOutcome;
use crate::AppState;
use crate::auth::Caller;
use crate::chains::Target;
use crate::chains::solana::build::{Transfer, pubkey, signed_receipt};
use crate::chains::solana::rpc::{SolanaRpc, tx_id};
use crate::chains::solana::verify;
use crate::error::ApiError;
use crate::settlement::engine::{SettleError, Settlement, record_confirmed, settle};
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

fn invalid(reason: impl Into<String>) -> ApiError {
    ApiError::new(ErrorCode::InvalidPaymentProof, reason)
}

/// Proof identity of a Solana transaction: network and first signature.
fn proof_id(network: &tollgate_protocol::Network, signature: &str) -> String {
    format!("{network}:{signature}")
}

/// Verifies and settles an incoming `exact-native` payment to `walletAddress`: a signed transfer
/// (checked, then broadcast by the facilitator) or a receipt of a confirmed transfer (checked
/// against the chain). A proof is accepted once.
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
    let rpc = &backend.rpc;
    let wallet = validate::address("walletAddress", &req.wallet_address)?;
    let pay_to = pubkey(&wallet).ok_or_else(|| ApiError::invalid_params("walletAddress must be a Solana address"))?;
    let expected = lamports(
        validate::native_amount("expectedAmount", &req.expected_amount, ChainFamily::Solana, None)?,
        "expectedAmount",
    )?;
    let payload = validate::payment_proof(&req.payment_proof)?;
    match payload.scheme() {
        SCHEME_EXACT_NATIVE => {}
        SCHEME_EXACT => {
            return Err(ApiError::verification_failed(
                "x402 exact (SPL token) proofs are not settled by this facilitator yet",
            ));
        }
        other => return Err(invalid(format!("unsupported scheme {other}"))),
    }
    if let PaymentPayload::V2(p) = &payload
        && (p.accepted.pay_to != wallet || p.accepted.asset != Asset::Native)
    {
        return Err(invalid("the proof was made for another recipient or asset"));
    }
    let native = ExactNativePayload::from_value(payload.payload()).map_err(|e| invalid(e.to_string()))?;
    let context = Incoming { state, caller, rpc, wallet, pay_to, expected, resource: req.resource.as_deref() };
    match native {
        ExactNativePayload::Transaction(tx) => {
            let wait = Duration::from_secs(req.timeout.unwrap_or(validate::DEFAULT_TIMEOUT_SECS));
            context.signed_transfer(&tx, wait).await
        }
        ExactNativePayload::Receipt(receipt) => context.receipt(payload.network(), &receipt).await,
    }
}

struct Incoming<'a> {
    state: &'a AppState,
    caller: &'a Caller,
    rpc: &'a SolanaRpc,
    wallet: Address,
    pay_to: Pubkey,
    expected: u64,
    resource: Option<&'a str>,
}

impl Incoming<'_> {
    async fn payment(
        &self,
        from: Pubkey,
        lamports: u64,
        fee: Option<u64>,
        proof: String,
        horizon: Option<u64>,
    ) -> Result<NewPayment, ApiError> {
        let payer_account =
            self.state.store.get_wallet(&from.to_string()).await.map_err(ApiError::internal)?.map(|w| w.account_id);
        Ok(NewPayment {
            id: format!("pay_{}", ulid::Ulid::new()),
            owner_account: self.caller.account_id.clone(),
            counterparty_account: payer_account,
            status: PaymentStatus::Verified,
            mode: PaymentMode::Hosted,
            network: self.rpc.network().clone(),
            from: from.to_string(),
            to: self.wallet.to_string(),
            amount_atomic: AtomicAmount::from(lamports),
            asset: "native".into(),
            decimals: ChainFamily::Solana.native_decimals(),
            fee_atomic: fee.map(AtomicAmount::from),
            transaction: None,
            resource: self.resource.map(str::to_owned),
            metadata: None,
            proof_id: Some(proof),
            expires_at: None,
            last_valid_block_height: horizon,
            created_at: self.state.clock.now(),
        })
    }

    /// A signed transfer: checked without the chain, then against it, then broadcast once.
    async fn signed_transfer(&self, encoded: &str, wait: Duration) -> Result<SendOutcome, ApiError> {
        let tx = verify::decode(encoded).map_err(|e| invalid(e.0))?;
        let checked = verify::check_signed_transfer(&tx, &self.pay_to, self.expected).map_err(|e| invalid(e.0))?;
        if !self.rpc.blockhash_valid(&checked.blockhash).await? {
            return Err(invalid("the transaction's blockhash has expired; sign a fresh one"));
        }
        let fee = match &tx.message {
            VersionedMessage::Legacy(m) => self.rpc.fee_for(m).await?,
            VersionedMessage::V0(m) => self.rpc.fee_for(m).await?,
            _ => return Err(invalid("only legacy and v0 transactions are accepted")),
        };
        let source = checked.transfer.from;
        let needed = checked.transfer.lamports.saturating_add(if checked.fee_payer == source { fee } else { 0 });
        let balance = self.rpc.balance(&source).await?;
        if balance < needed {
            return Err(invalid(format!(
                "insufficient_funds: the payer holds {} SOL, the transaction needs {} SOL",
                sol(balance),
                sol(needed)
            )));
        }
        // The transaction's blockhash is valid now, so it cannot land after the horizon of the
        // newest blockhash: past that height, a transaction the chain never saw has expired.
        let (_, horizon) = self.rpc.latest_blockhash().await?;
        let signature = tx.signatures[0].to_string();
        let proof = proof_id(self.rpc.network(), &signature);
        let payment = self.payment(source, checked.transfer.lamports, Some(fee), proof, Some(horizon)).await?;
        let tx_bytes = bincode::serialize(&tx).map_err(ApiError::internal)?;
        let settled = settle(
            &*self.state.store,
            &*self.state.clock,
            self.rpc,
            Settlement { payment, tx_id: signature, tx_bytes, wait },
        )
        .await;
        self.outcome(settled)
    }

    /// A receipt: the sender's signature over the payment's terms, and the transfer on chain.
    async fn receipt(
        &self,
        network: &tollgate_protocol::Network,
        receipt: &NativeReceipt,
    ) -> Result<SendOutcome, ApiError> {
        let from = pubkey(&receipt.from).ok_or_else(|| invalid("receipt.from must be a Solana address"))?;
        if let Some(wanted) = self.resource
            && receipt.resource.as_deref() != Some(wanted)
        {
            return Err(invalid("the receipt was made for another resource"));
        }
        let message = receipt_message(network, &receipt.transaction, &self.wallet, receipt.resource.as_deref());
        let signed = receipt.signature.parse::<Signature>().is_ok_and(|s| s.verify(from.as_ref(), message.as_bytes()));
        if !signed {
            return Err(invalid(
                "the receipt's signature does not verify for its sender, recipient, network and resource",
            ));
        }
        let tx_signature: Signature =
            receipt.transaction.parse().map_err(|_| invalid("receipt.transaction is not a Solana signature"))?;
        let confirmed = self
            .rpc
            .confirmed_transaction(&tx_signature)
            .await?
            .ok_or_else(|| invalid("the receipt's transaction is not confirmed on chain"))?;
        if let Some(error) = confirmed.error {
            return Err(invalid(format!("the receipt's transaction failed on chain: {error}")));
        }
        let keys = confirmed.transaction.message.static_account_keys();
        let signer = keys.iter().position(|k| *k == from).is_some_and(|i| confirmed.transaction.message.is_signer(i));
        if !signer {
            return Err(invalid("the receipt's sender did not sign that transaction"));
        }
        let paid = verify::transferred(&confirmed.transaction, &from, &self.pay_to);
        if paid < self.expected {
            return Err(invalid(format!(
                "that transaction paid {paid} lamports from the sender to walletAddress, less than the {} expected",
                self.expected
            )));
        }
        let payment = self.payment(from, paid, confirmed.fee, proof_id(network, &receipt.transaction), None).await?;
        let recorded = record_confirmed(
            &*self.state.store,
            &*self.state.clock,
            payment,
            &receipt.transaction,
            confirmed.fee.map(AtomicAmount::from),
        )
        .await;
        self.outcome(recorded)
    }

    fn outcome(&self, settled: Result<crate::store::StoredPayment, SettleError>) -> Result<SendOutcome, ApiError> {
        let stored = match settled {
            Ok(s) => s,
            Err(SettleError::AlreadyClaimed { payment_id }) => {
                return Err(invalid(format!("proof already used (payment {payment_id})")));
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
}
