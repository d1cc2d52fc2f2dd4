//! A contract call that settles a payment (EIP-3009's `transferWithAuthorization`, an x402
//! Permit2 proxy's `settle`): simulated for a verdict, or prepared to be sent — signed by the
//! facilitator's account when its turn comes, or handed to the seller's unsigned (local mode).
//! A call that can only pass after a transaction of the payer's (its signed approval of Permit2)
//! is sent when that one is mined ([`after`]).

use alloy::consensus::TxEip1559;
use alloy::primitives::{Address, B256, Bytes, TxKind, U256};
use alloy::rpc::types::TransactionRequest;
use async_trait::async_trait;

use super::{EvmBackend, FacilitatorSigner, build, refuse};
use crate::chains::{ChainError, Intent, Outgoing, ProofError, Reason, Settle, Settler, Signable};

/// What simulating a settlement said.
pub(super) enum Prepared {
    /// It passes: how it settles, and the most its gas can cost the facilitator (when it pays).
    Passes(Settle, Option<u128>),
    /// The node says it fails, and why (the caller names the reason).
    Fails(String),
}

/// `data` sent to `to` from `sender`, simulated: for a verdict ([`Intent::Verify`]), with the
/// gas cap as its gas; to settle, its gas estimated (which simulates it as the chain is then),
/// and the call to sign (facilitator: with the fees it is signed with, whose most is the fee
/// counted) or to hand over unsigned (seller).
///
/// # Errors
/// [`ProofError`] when the chain cannot be asked, or the call needs more gas than the cap.
pub(super) async fn prepare(
    backend: &EvmBackend,
    (sender, to, data): (Address, Address, Vec<u8>),
    (settler, intent): (Settler, Intent),
) -> Result<Prepared, ProofError> {
    let rpc = &backend.rpc;
    let call = TransactionRequest::default().from(sender).to(to).input(Bytes::from(data.clone()).into());
    if intent == Intent::Verify {
        let simulated = rpc.simulate(call.gas_limit(backend.max_gas));
        let simulated = if settler == Settler::Facilitator {
            tokio::join!(simulated, backend.warm_for_settlement()).0
        } else {
            simulated.await
        };
        return Ok(match simulated? {
            Ok(_) => Prepared::Passes(Settle::Nothing, None),
            Err(failure) => Prepared::Fails(failure),
        });
    }
    // Settling: the estimate simulates the call again against the chain as it is now, and
    // gives the gas limit. A limit of the cap instead would let a payer's wallet contract that
    // spends whatever gas it is given burn the cap on every settlement. The facilitator's call
    // is simulated at the fees it is signed with: a payer's wallet contract that passes only at
    // a zero gas price (as simulations run by default) fails here, not on chain at its cost.
    let fees = match settler {
        Settler::Facilitator => Some(rpc.fees().await?),
        Settler::Seller(_) => None,
    };
    let priced = match &fees {
        Some(f) => call.max_fee_per_gas(f.max_fee_per_gas).max_priority_fee_per_gas(f.max_priority_fee_per_gas),
        None => call,
    };
    let gas = match rpc.estimate(priced).await? {
        Ok(gas) => gas,
        Err(failure) => return Ok(Prepared::Fails(failure)),
    };
    if gas > backend.max_gas {
        return Err(refuse(Reason::EvmSimulationFailed, format!("the settlement needs {gas} gas, above the cap")));
    }
    // Margin over the estimate, within the cap.
    let gas_limit = gas.saturating_add(gas / 5).min(backend.max_gas);
    let call = ContractCall { backend: CallSender::of(backend), to, data, gas_limit, fees: None, first: None };
    Ok(match fees {
        // Read for the facilitator only: it signs.
        Some(fees) => {
            // The fees it is signed with, read once: what the account's budget counts.
            let fee = u128::from(gas_limit).saturating_mul(fees.max_fee_per_gas);
            Prepared::Passes(Settle::Sign(Box::new(ContractCall { fees: Some(fees), ..call })), Some(fee))
        }
        None => {
            let (transaction, fee) = call.unsigned_from(sender).await?;
            let horizon = rpc.block_number().await?.saturating_add(super::send::HORIZON_BLOCKS);
            Prepared::Passes(Settle::Handover { transaction, fee, horizon }, None)
        }
    })
}

/// The most gas a settlement sent after a payer's approval may take (it cannot be estimated
/// before the approval is mined): a Permit2 proxy's `settle` takes about 100,000.
pub(super) const AFTER_GAS: u64 = 200_000;

/// `data` sent to `to` from the facilitator's account once `first` — a payer's own signed
/// transaction (its EIP-2718 bytes and hash), without which the call cannot pass — is mined:
/// broadcast (again: a repeat is harmless) and waited for when it is signed, then the call
/// simulated and estimated against the chain as it is then, within [`AFTER_GAS`], and signed
/// with `fees` (read by the check). The most its gas may cost, for the account's budget.
pub(super) fn after(
    backend: &EvmBackend,
    first: (Vec<u8>, B256),
    (to, data): (Address, Vec<u8>),
    fees: alloy::eips::eip1559::Eip1559Estimation,
) -> (Box<dyn Signable>, u128) {
    let gas_limit = AFTER_GAS.min(backend.max_gas);
    let most = u128::from(gas_limit).saturating_mul(fees.max_fee_per_gas);
    let backend = CallSender::of(backend);
    let call = ContractCall { backend, to, data, gas_limit, fees: Some(fees), first: Some(first) };
    (Box::new(call), most)
}

/// How long a settlement waits for the payer's transaction it follows to be mined.
const FIRST_WAIT: std::time::Duration = std::time::Duration::from_secs(30);
/// The longest pause between two looks for that transaction's receipt.
const FIRST_POLL_CAP: std::time::Duration = std::time::Duration::from_millis(100);

/// What sending a contract call needs of the backend.
struct CallSender {
    rpc: super::rpc::EvmRpc,
    nonces: std::sync::Arc<super::nonce::NonceManager>,
    signer: Option<FacilitatorSigner>,
    max_fee_per_gas: u128,
}

impl CallSender {
    fn of(backend: &EvmBackend) -> Self {
        Self {
            rpc: backend.rpc.clone(),
            nonces: backend.nonces.clone(),
            signer: backend.signer.clone(),
            max_fee_per_gas: backend.max_fee_per_gas,
        }
    }
}

/// A settling call, sent from the facilitator's account (or built for the seller's).
struct ContractCall {
    backend: CallSender,
    to: Address,
    data: Vec<u8>,
    gas_limit: u64,
    /// The fees read when it was checked, to sign with (else read when signing).
    fees: Option<alloy::eips::eip1559::Eip1559Estimation>,
    /// A payer's transaction (bytes, hash) to see mined first; the call's gas is then estimated
    /// when it is signed.
    first: Option<(Vec<u8>, B256)>,
}

impl ContractCall {
    fn tx(&self, nonce: u64, fees: &alloy::eips::eip1559::Eip1559Estimation, gas_limit: u64) -> TxEip1559 {
        TxEip1559 {
            chain_id: self.backend.rpc.chain_id(),
            nonce,
            gas_limit,
            max_fee_per_gas: fees.max_fee_per_gas,
            max_priority_fee_per_gas: fees.max_priority_fee_per_gas,
            to: TxKind::Call(self.to),
            value: U256::ZERO,
            access_list: Default::default(),
            input: self.data.clone().into(),
        }
    }

    /// The unsigned call from the seller's account (its signing payload) and the most its gas
    /// can cost.
    async fn unsigned_from(&self, seller: Address) -> Result<(Vec<u8>, u128), ProofError> {
        let rpc = &self.backend.rpc;
        let fees = rpc.fees().await?;
        let tx = self.tx(rpc.pending_nonce(seller).await?, &fees, self.gas_limit);
        Ok((build::unsigned_bytes(&tx), u128::from(self.gas_limit).saturating_mul(fees.max_fee_per_gas)))
    }
}

#[async_trait]
impl Signable for ContractCall {
    /// Signed by the facilitator's account under its next nonce, held until the broadcast.
    async fn sign(&self) -> Result<Outgoing, ChainError> {
        let b = &self.backend;
        let signer = b.signer.as_ref().ok_or_else(|| ChainError("no facilitator account on this chain".into()))?;
        let fees = match self.fees {
            Some(fees) => fees,
            None => b.rpc.fees().await?,
        };
        if fees.max_fee_per_gas > b.max_fee_per_gas {
            return Err(ChainError(format!(
                "gas costs {} wei, above the {} wei this facilitator pays; try again later",
                fees.max_fee_per_gas, b.max_fee_per_gas
            )));
        }
        let gas_limit = match &self.first {
            None => self.gas_limit,
            Some(first) => self.after_first(first, signer.0.address()).await?,
        };
        let lease = b.nonces.lease(&b.rpc, signer.0.address()).await?;
        let (raw, hash) = build::sign(self.tx(lease.nonce(), &fees, gas_limit), &signer.0)
            .map_err(|e| ChainError(format!("cannot sign the settlement: {e}")))?;
        Ok(Outgoing { tx_id: format!("{hash:#x}"), raw, horizon: None, hold: Some(Box::new(lease)) })
    }
}

impl ContractCall {
    /// Sends the payer's transaction `first` (bytes, hash) and waits until it is mined and
    /// succeeded; then the call's gas, estimated from `sender` against the chain as it is now.
    async fn after_first(&self, (raw, hash): &(Vec<u8>, B256), sender: Address) -> Result<u64, ChainError> {
        let rpc = &self.backend.rpc;
        if rpc.receipt(*hash).await?.is_none() {
            // Refused as known or as an old nonce: it may be ours, mined or on its way; the
            // receipt says.
            if let Err(e) = rpc.send_raw(raw).await {
                tracing::debug!(error = %e, %hash, "the payer's transaction was not taken anew; waiting for its receipt");
            }
        }
        let deadline = tokio::time::Instant::now() + FIRST_WAIT;
        let mut attempt = 0;
        let mined = loop {
            if let Some(receipt) = rpc.receipt(*hash).await? {
                break receipt;
            }
            if tokio::time::Instant::now() > deadline {
                return Err(ChainError(format!("the payer's approval {hash:#x} was not mined in time")));
            }
            tokio::time::sleep(crate::chains::poll_delay(attempt, FIRST_POLL_CAP)).await;
            attempt += 1;
        };
        if !mined.status() {
            return Err(ChainError(format!("the payer's approval {hash:#x} failed on chain")));
        }
        let mut call =
            TransactionRequest::default().from(sender).to(self.to).input(Bytes::from(self.data.clone()).into());
        // At the fees it is signed with (see [`prepare`]).
        if let Some(f) = &self.fees {
            call = call.max_fee_per_gas(f.max_fee_per_gas).max_priority_fee_per_gas(f.max_priority_fee_per_gas);
        }
        match rpc.estimate(call).await? {
            Ok(gas) if gas <= self.gas_limit => Ok(gas.saturating_add(gas / 5).min(self.gas_limit)),
            Ok(gas) => Err(ChainError(format!("the settlement needs {gas} gas, above the {} counted", self.gas_limit))),
            Err(failure) => Err(ChainError(format!("the settlement would fail after the approval: {failure}"))),
        }
    }
}
