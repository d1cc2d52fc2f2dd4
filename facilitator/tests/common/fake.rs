//! A chain that does at once what the payment core asks, except at a [`Gate`] where a test
//! stops it: for the core's own tests (cancellation, reconciliation), where a real chain could
//! not be made to stop at a given step.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tokio::sync::Notify;
use tollgate_facilitator::chains::{
    Chain, ChainError, Checked, Intent, Kinds, Landed, Order, OrderError, Outgoing, PlannedSend, Price, Proof,
    ProofError, SendError, Settle, Settler, Signable, Terms, TxStatus, Unsigned, Watched,
};
use tollgate_protocol::gateway::TokenInfo;
use tollgate_protocol::x402::{Asset, PaymentPayload};
use tollgate_protocol::{Address, AtomicAmount, Network};

/// Where the fake chain stops, and the two signals around the stop.
#[derive(Debug, Default)]
pub struct Gate {
    pub stop_at: Mutex<Option<&'static str>>,
    pub entered: Notify,
    pub release: Notify,
}

impl Gate {
    /// Stops here when this is the step asked for (once).
    pub async fn pass(&self, step: &'static str) {
        let stop = {
            let mut at = self.stop_at.lock().unwrap();
            let stop = *at == Some(step);
            if stop {
                *at = None;
            }
            stop
        };
        if stop {
            self.entered.notify_one();
            self.release.notified().await;
        }
    }
}

/// A chain that does what it is asked at once, except at the gate.
#[derive(Debug)]
pub struct FakeChain {
    pub gate: Arc<Gate>,
    /// Every broadcast, by transaction id.
    pub broadcasts: Arc<Mutex<Vec<String>>>,
    signed: Arc<AtomicU64>,
    network: Network,
}

impl Default for FakeChain {
    fn default() -> Self {
        Self { gate: Arc::default(), broadcasts: Arc::default(), signed: Arc::default(), network: network() }
    }
}

/// The network it serves.
pub fn network() -> Network {
    Network::solana_devnet()
}

struct FakeSigner {
    gate: Arc<Gate>,
    signed: Arc<AtomicU64>,
    amount: u128,
}

#[async_trait]
impl Signable for FakeSigner {
    async fn sign(&self) -> Result<Outgoing, ChainError> {
        self.gate.pass("sign").await;
        let n = self.signed.fetch_add(1, Ordering::SeqCst);
        // A fake transaction's id ends with the base units it moves.
        let id = format!("send-{n}-{}", self.amount);
        Ok(Outgoing::ready(id.clone(), id.into_bytes(), None))
    }
}

#[async_trait]
impl Chain for FakeChain {
    fn network(&self) -> &Network {
        &self.network
    }

    fn kinds(&self) -> Kinds {
        Kinds { schemes: vec![("exact-native", None)], signer: None, extensions: Vec::new() }
    }

    fn decode(&self, payload: &PaymentPayload, _asset: &Asset) -> Proof {
        Proof::new(Some(format!("{}:{payload:?}", network())), ())
    }

    async fn check(
        &self,
        proof: &Proof,
        terms: &Terms,
        _settler: Settler,
        _intent: Intent,
        _now: i64,
    ) -> Result<Checked, ProofError> {
        self.gate.pass("check").await;
        let amount = match &terms.price {
            Price::AtLeast(whole) => whole.to_atomic(9).unwrap().get(),
            Price::AtLeastAtomic(n) | Price::Exactly(n) => *n,
        };
        let proof_id = proof.id().unwrap().to_owned();
        // The buyer's transaction: the same for the same proof.
        let mut hasher = std::hash::DefaultHasher::new();
        std::hash::Hash::hash(&proof_id, &mut hasher);
        let tx_id = format!("buyer-{:x}-{amount}", std::hash::Hasher::finish(&hasher));
        Ok(Checked {
            settle: Settle::Broadcast(Outgoing::ready(tx_id.clone(), tx_id.into_bytes(), None)),
            payer: Address::Solana([9; 32]),
            pay_to: terms.pay_to,
            asset: terms.asset,
            amount,
            decimals: 9,
            fee: Some(5_000),
        })
    }

    async fn plan_send(&self, order: &Order, _key: &[u8]) -> Result<PlannedSend, OrderError> {
        self.gate.pass("plan").await;
        let signer = FakeSigner { gate: self.gate.clone(), signed: self.signed.clone(), amount: order.amount.get() };
        Ok(PlannedSend { fee: AtomicAmount(5_000), tx: Box::new(signer) })
    }

    async fn build(&self, _order: &Order) -> Result<Unsigned, OrderError> {
        Err(OrderError::Invalid("local mode is not part of this test".into()))
    }

    fn signed_identity(&self, transaction: &[u8]) -> Option<String> {
        String::from_utf8(transaction.to_vec()).ok()
    }

    fn sign_receipt(&self, _: &[u8], tx_id: &str, _: &Address, _: Option<&str>) -> Result<String, ChainError> {
        Ok(format!("receipt-of-{tx_id}"))
    }

    async fn broadcast(&self, raw: &[u8]) -> Result<(), SendError> {
        self.gate.pass("broadcast").await;
        self.broadcasts.lock().unwrap().push(String::from_utf8(raw.to_vec()).unwrap());
        Ok(())
    }

    async fn outcome(&self, tx: &Watched<'_>) -> Result<Option<Landed>, ChainError> {
        self.gate.pass("outcome").await;
        let landed = self.broadcasts.lock().unwrap().iter().any(|b| b == tx.id);
        // A broadcast transfer moves what its id says.
        let arrived = tx.id.rsplit('-').next().and_then(|n| n.parse().ok()).unwrap_or(0);
        Ok(landed.then(|| Landed {
            tx_id: tx.id.to_owned(),
            signed: tx.id.to_owned(),
            error: None,
            arrived,
            fee: Some(AtomicAmount(5_000)),
        }))
    }

    async fn status(&self, tx: &Watched<'_>) -> Result<TxStatus, ChainError> {
        Ok(match self.outcome(tx).await? {
            Some(landed) => TxStatus::Landed(landed),
            None => TxStatus::Unseen,
        })
    }

    fn transaction_id(&self, tx: &str) -> Option<String> {
        Some(tx.to_owned())
    }

    async fn token_info(&self, _: &Address) -> Result<Option<TokenInfo>, ChainError> {
        Ok(None)
    }

    async fn verify_message(
        &self,
        _: &Address,
        _: &str,
        _: &str,
    ) -> Result<tollgate_facilitator::chains::Signer, ProofError> {
        Err(ProofError::Refused(tollgate_facilitator::chains::Refusal::new(
            tollgate_facilitator::chains::Reason::SignInSignature,
            "the fake chain signs in nobody",
        )))
    }
}
