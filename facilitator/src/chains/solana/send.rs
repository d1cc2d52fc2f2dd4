//! Native SOL transfers the facilitator makes (hosted sends from a custodial wallet) or builds
//! (local mode), and what the chain says about a transaction reported for a local payment.
//!
//! Two identical sends signed against the same blockhash would be the same transaction (Solana
//! signatures are deterministic). Each hosted send therefore carries a compute-unit limit of its
//! own, drawn at random when it is signed: it changes the signature, not the fee (see
//! [`Transfer::message_with_limit`]). The payment store's unique transaction index catches the
//! rare draw of a limit already used, and the payment core then signs again.

use async_trait::async_trait;
use solana_sdk::hash::Hash;
use solana_sdk::pubkey::Pubkey;
use solana_sdk::signature::Keypair;
use solana_sdk::signer::Signer as _;
use solana_sdk::transaction::{Transaction, VersionedTransaction};
use tollgate_protocol::{AtomicAmount, ChainFamily, DecimalAmount};

use super::build::{TRANSFER_COMPUTE_UNITS, Transfer, pubkey};
use super::encode;
use super::rpc::SolanaRpc;
use crate::chains::{ChainError, Order, OrderError, Outgoing, PlannedSend, Signable, Unsigned};

/// How far above [`TRANSFER_COMPUTE_UNITS`] a hosted send's own limit may be.
const UNIQUE_UNITS_SPREAD: u32 = 100_000;

fn sol(lamports: u64) -> String {
    DecimalAmount::from_atomic(AtomicAmount::from(lamports), ChainFamily::Solana.native_decimals()).to_string()
}

fn lamports(amount: AtomicAmount, field: &str) -> Result<u64, OrderError> {
    u64::try_from(amount.get()).map_err(|_| OrderError::Invalid(format!("{field} is too large")))
}

/// The order's transfer (addresses as keys, amounts in lamports).
fn transfer(order: &Order) -> Result<Transfer, OrderError> {
    let (Some(from), Some(to)) = (pubkey(&order.from), pubkey(&order.to)) else {
        return Err(OrderError::InvalidRecipient("both addresses must be Solana addresses".into()));
    };
    if is_reserved(&from) {
        return Err(OrderError::Invalid(format!("{from} is a builtin program or a sysvar: it cannot pay")));
    }
    let priority_fee = order.priority_fee.map(|f| lamports(f, "priorityFee")).transpose()?;
    Ok(Transfer { from, to, lamports: lamports(order.amount, "amount")?, priority_fee })
}

/// Plans a hosted send from `keypair`'s wallet: checks the balance (amount, fee and the rent a
/// Solana account must keep) and the recipient (a new account needs the rent minimum).
pub(super) async fn plan(rpc: &SolanaRpc, order: &Order, keypair: Keypair) -> Result<PlannedSend, OrderError> {
    let transfer = transfer(order)?;
    if keypair.pubkey() != transfer.from {
        return Err(OrderError::Invalid("the wallet's key does not match walletAddress".into()));
    }
    let (blockhash, horizon) = rpc.latest_blockhash().await?;
    let fee = rpc.fee_for(&transfer.message(&blockhash)).await?;
    let balance = rpc.balance(&transfer.from).await?;
    let rent_minimum = rpc.rent_exempt_minimum().await?;
    let needed = transfer.lamports.saturating_add(fee);
    if balance < needed {
        return Err(OrderError::InsufficientBalance(format!(
            "the wallet holds {} SOL; the payment needs {} SOL ({} + {} fee)",
            sol(balance),
            sol(needed),
            sol(transfer.lamports),
            sol(fee)
        )));
    }
    let left = balance - needed;
    if left > 0 && left < rent_minimum {
        return Err(OrderError::InsufficientBalance(format!(
            "the payment would leave {} SOL, below the {} SOL a Solana account must keep (send everything or less)",
            sol(left),
            sol(rent_minimum)
        )));
    }
    check_payee(rpc, &transfer, rent_minimum).await?;
    let tx = HostedTransfer { keypair, transfer, blockhash, horizon };
    Ok(PlannedSend { fee: AtomicAmount::from(fee), tx: Box::new(tx) })
}

/// A hosted send, signed anew (with a limit of its own) each time it is asked to.
struct HostedTransfer {
    keypair: Keypair,
    transfer: Transfer,
    blockhash: Hash,
    horizon: u64,
}

#[async_trait]
impl Signable for HostedTransfer {
    async fn sign(&self) -> Result<Outgoing, ChainError> {
        let units = TRANSFER_COMPUTE_UNITS + rand::random_range(0..UNIQUE_UNITS_SPREAD);
        let message = self.transfer.message_with_limit(&self.blockhash, Some(units));
        let tx = Transaction::new(&[&self.keypair], message, self.blockhash);
        let tx = VersionedTransaction::from(tx);
        Ok(Outgoing::ready(tx.signatures[0].to_string(), encode(&tx)?, Some(self.horizon)))
    }
}

/// Refuses a transfer the chain would refuse: to a program or a sysvar, or less than the
/// rent-exempt minimum to an account that does not exist yet.
async fn check_payee(rpc: &SolanaRpc, transfer: &Transfer, rent_minimum: u64) -> Result<(), OrderError> {
    if is_reserved(&transfer.to) {
        return Err(OrderError::InvalidRecipient(format!(
            "{} is a builtin program or a sysvar: it cannot receive SOL",
            transfer.to
        )));
    }
    match rpc.payee(&transfer.to).await? {
        Some(payee) if payee.unpayable => Err(OrderError::InvalidRecipient(format!(
            "{} is a program or a sysvar: it cannot receive SOL",
            transfer.to
        ))),
        Some(payee) if payee.lamports > 0 => Ok(()),
        _ if transfer.lamports < rent_minimum => Err(OrderError::InvalidRecipient(format!(
            "a new Solana account must receive at least {} SOL",
            sol(rent_minimum)
        ))),
        _ => Ok(()),
    }
}

/// A key the runtime reserves (each builtin program and sysvar, as Agave lists them): no
/// transaction can credit it, whether or not it exists as an account on this cluster.
pub(crate) fn is_reserved(key: &Pubkey) -> bool {
    use solana_sdk_ids::{sysvar, *};
    let reserved = [
        address_lookup_table::ID,
        bpf_loader::ID,
        bpf_loader_deprecated::ID,
        bpf_loader_upgradeable::ID,
        compute_budget::ID,
        config::ID,
        ed25519_program::ID,
        feature::ID,
        loader_v4::ID,
        native_loader::ID,
        secp256k1_program::ID,
        secp256r1_program::ID,
        stake::ID,
        system_program::ID,
        vote::ID,
        zk_elgamal_proof_program::ID,
        zk_token_proof_program::ID,
        sysvar::ID,
        sysvar::clock::ID,
        sysvar::epoch_rewards::ID,
        sysvar::epoch_schedule::ID,
        sysvar::fees::ID,
        sysvar::instructions::ID,
        sysvar::last_restart_slot::ID,
        sysvar::recent_blockhashes::ID,
        sysvar::rent::ID,
        sysvar::rewards::ID,
        sysvar::slot_hashes::ID,
        sysvar::slot_history::ID,
        sysvar::stake_history::ID,
    ];
    reserved.iter().any(|id| id.to_bytes() == key.to_bytes())
}

/// Builds an unsigned transfer for the payer to sign (local mode), with a compute-unit limit of
/// its own (as a hosted send's), so that two builds of one order are two transactions: a transfer
/// that lands is the payment of the build whose message it signed, and of no other.
pub(super) async fn build(rpc: &SolanaRpc, order: &Order) -> Result<Unsigned, OrderError> {
    let transfer = transfer(order)?;
    check_payee(rpc, &transfer, rpc.rent_exempt_minimum().await?).await?;
    let (blockhash, horizon) = rpc.latest_blockhash().await?;
    let units = TRANSFER_COMPUTE_UNITS + rand::random_range(0..UNIQUE_UNITS_SPREAD);
    let message = transfer.message_with_limit(&blockhash, Some(units));
    let fee = rpc.fee_for(&message).await?;
    if rpc.balance(&transfer.from).await? < transfer.lamports.saturating_add(fee) {
        return Err(OrderError::InsufficientBalance("the wallet cannot pay the amount plus the network fee".into()));
    }
    let unsigned = Transaction::new_unsigned(message);
    let transaction = bincode::serialize(&unsigned).map_err(|e| ChainError(format!("cannot encode: {e}")))?;
    Ok(Unsigned { transaction, horizon, fee: AtomicAmount::from(fee) })
}
