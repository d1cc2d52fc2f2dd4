//! A contract call that settles a payment (EIP-3009's `transferWithAuthorization`, an x402
//! Permit2 proxy's `settle`): simulated for a verdict, or prepared to be sent — signed by the
//! facilitator's account when its turn comes, or handed to the seller's unsigned (local mode).

use alloy::consensus::TxEip1559;
use alloy::primitives::{Address, Bytes, TxKind, U256};
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
        return Ok(match rpc.simulate(call.gas_limit(backend.max_gas)).await? {
            Ok(_) => Prepared::Passes(Settle::Nothing, None),
            Err(failure) => Prepared::Fails(failure),
        });
    }
    // Settling: the estimate simulates the call again against the chain as it is now, and
    // gives the gas limit. A limit of the cap instead would let a payer's wallet contract that
    // spends whatever gas it is given burn the cap on every settlement.
    let gas = match rpc.estimate(call).await? {
        Ok(gas) => gas,
        Err(failure) => return Ok(Prepared::Fails(failure)),
    };
    if gas > backend.max_gas {
        return Err(refuse(Reason::EvmSimulationFailed, format!("the settlement needs {gas} gas, above the cap")));
    }
    // Margin over the estimate, within the cap.
    let gas_limit = gas.saturating_add(gas / 5).min(backend.max_gas);
    let call = ContractCall { backend: CallSender::of(backend), to, data, gas_limit, fees: None };
    Ok(match settler {
        Settler::Facilitator => {
            // The fees it is signed with, read once: what the account's budget counts.
            let fees = rpc.fees().await?;
            let fee = u128::from(gas_limit).saturating_mul(fees.max_fee_per_gas);
            Prepared::Passes(Settle::Sign(Box::new(ContractCall { fees: Some(fees), ..call })), Some(fee))
        }
        Settler::Seller(_) => {
            let (transaction, fee) = call.unsigned_from(sender).await?;
            let horizon = rpc.block_number().await?.saturating_add(super::send::HORIZON_BLOCKS);
            Prepared::Passes(Settle::Handover { transaction, fee, horizon }, None)
        }
    })
}

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
}

impl ContractCall {
    fn tx(&self, nonce: u64, fees: &alloy::eips::eip1559::Eip1559Estimation) -> TxEip1559 {
        TxEip1559 {
            chain_id: self.backend.rpc.chain_id(),
            nonce,
            gas_limit: self.gas_limit,
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
        let tx = self.tx(rpc.pending_nonce(seller).await?, &fees);
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
        let lease = b.nonces.lease(&b.rpc, signer.0.address()).await?;
        let (raw, hash) = build::sign(self.tx(lease.nonce(), &fees), &signer.0)
            .map_err(|e| ChainError(format!("cannot sign the settlement: {e}")))?;
        Ok(Outgoing { tx_id: format!("{hash:#x}"), raw, horizon: None, hold: Some(Box::new(lease)) })
    }
}
