//! The payment core against the embedded ledger, for what only this crate can see: how often a
//! proof's transaction is decoded on its way through (once per request), and how a contract
//! payment goes from its check to its record (what the check found is what is recorded and
//! asked of the chain; a refusal met while a twin settled it is answered with the twin's).

use std::sync::Arc;
use std::time::Duration;

use solana_sdk::signature::Keypair;
use solana_sdk::signer::Signer as _;
use tollgate_protocol::gateway::PaymentStatus;
use tollgate_protocol::x402::{Asset, PaymentPayload};
use tollgate_protocol::{Address, Network};

use super::{ContractPayment, PaymentError, Payments, Prepared, Receive, Repeat};
use crate::chains::solana::build::Transfer;
use crate::chains::solana::embedded::{self, EmbeddedLedger};
use crate::chains::solana::rpc::{DEFAULT_CALL_TIMEOUT, SolanaRpc};
use crate::chains::{Chains, Price, SolanaBackend, Terms, decodes};
use crate::clock::SystemClock;
use crate::config::DatabaseUrl;
use crate::plans::Sponsorship;
use crate::store::SqlStore;

/// A funded payer's `exact-native` payload paying `to` 1,000,000 lamports.
async fn transfer(rpc: &SolanaRpc, payer: &Keypair, to: &Address) -> PaymentPayload {
    use base64::Engine as _;
    let Address::Solana(to) = to else { unreachable!("a Solana payee") };
    let (blockhash, _) = rpc.latest_blockhash().await.unwrap();
    let message = Transfer { from: payer.pubkey(), to: (*to).into(), lamports: 1_000_000, priority_fee: None }
        .message(&blockhash);
    let tx = solana_sdk::transaction::Transaction::new(&[payer], message, blockhash);
    let encoded = base64::engine::general_purpose::STANDARD.encode(bincode::serialize(&tx).unwrap());
    serde_json::from_value(serde_json::json!({
        "x402Version": 1, "scheme": "exact-native", "network": rpc.network(),
        "payload": {"transaction": encoded},
    }))
    .unwrap()
}

fn receive(network: &Network, payload: PaymentPayload, pay_to: Address, repeat: Repeat) -> Receive {
    Receive {
        account: "acct".into(),
        payload,
        terms: Terms {
            network: network.clone(),
            pay_to,
            asset: Asset::Native,
            price: Price::AtLeastAtomic(1_000_000),
            resource: Some("https://seller.test/report".into()),
            method: Some("GET".into()),
            extra: None,
            requirement: None,
            fee_cap: None,
        },
        wait: Duration::from_secs(20),
        repeat,
        sponsorship: Sponsorship { lamports_per_day: 0, wei_per_day: 0 },
    }
}

/// The one decode happens on this thread: the core's jobs run on spawned tasks, which a
/// current-thread runtime (the test's) runs here.
#[tokio::test]
async fn a_proof_is_decoded_once_per_request() {
    let dir = tempfile::tempdir().unwrap();
    let url = DatabaseUrl::parse(dir.path().join("decodes.db").to_str().unwrap()).unwrap();
    let store = Arc::new(SqlStore::connect(&url).await.unwrap());
    let ledger = EmbeddedLedger::start().await.unwrap();
    let rpc = SolanaRpc::connect(ledger.rpc_url(), DEFAULT_CALL_TIMEOUT).await.unwrap();
    let network = rpc.network().clone();
    let (payer, other) = (Keypair::new(), Keypair::new());
    embedded::fund(&rpc, &payer).await.unwrap();
    embedded::fund(&rpc, &other).await.unwrap();
    let (payee, seller) = (Keypair::new().pubkey(), Keypair::new().pubkey());
    let (payee, seller) = (Address::Solana(payee.to_bytes()), Address::Solana(seller.to_bytes()));
    let hosted = transfer(&rpc, &payer, &payee).await;
    let x402 = transfer(&rpc, &other, &seller).await;
    let chains = Chains::none().with_solana(SolanaBackend::new(rpc).with_embedded(ledger));
    let payments = Payments::new(store, Arc::new(SystemClock), Arc::new(chains), None);

    // A hosted receive: checked, claimed, broadcast and watched to its verdict.
    let before = decodes::so_far();
    let paid = payments.receive(receive(&network, hosted, payee, Repeat::Used)).await.unwrap();
    assert_eq!(paid.payment.status, PaymentStatus::Confirmed);
    assert_eq!(decodes::so_far() - before, 1, "a hosted receive decodes its proof once");

    // x402: a verify, then the settlement of the same proof.
    let before = decodes::so_far();
    payments.verify(receive(&network, x402.clone(), seller, Repeat::Confirmed)).await.unwrap();
    assert_eq!(decodes::so_far() - before, 1, "a verify decodes its proof once");
    let before = decodes::so_far();
    let settled = payments.receive(receive(&network, x402, seller, Repeat::Confirmed)).await.unwrap();
    assert_eq!(settled.payment.status, PaymentStatus::Confirmed);
    assert_eq!(decodes::so_far() - before, 1, "a settlement decodes its proof once");
}

/// A transaction signed beforehand, handed out as the contract call's signature.
struct Presigned {
    tx_id: String,
    raw: Vec<u8>,
    horizon: u64,
}

#[async_trait::async_trait]
impl crate::chains::Signable for Presigned {
    async fn sign(&self) -> Result<crate::chains::Outgoing, crate::chains::ChainError> {
        Ok(crate::chains::Outgoing::ready(self.tx_id.clone(), self.raw.clone(), Some(self.horizon)))
    }
}

/// The embedded ledger with a funded payer, and the payment core over it.
struct Ledger {
    _dir: tempfile::TempDir,
    rpc: SolanaRpc,
    payer: Keypair,
    payments: Payments,
}

impl Ledger {
    async fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let url = DatabaseUrl::parse(dir.path().join("contract.db").to_str().unwrap()).unwrap();
        let store = Arc::new(SqlStore::connect(&url).await.unwrap());
        let ledger = EmbeddedLedger::start().await.unwrap();
        let rpc = SolanaRpc::connect(ledger.rpc_url(), DEFAULT_CALL_TIMEOUT).await.unwrap();
        let chain_rpc = SolanaRpc::connect(ledger.rpc_url(), DEFAULT_CALL_TIMEOUT).await.unwrap();
        let payer = Keypair::new();
        embedded::fund(&rpc, &payer).await.unwrap();
        let chains = Chains::none().with_solana(SolanaBackend::new(chain_rpc).with_embedded(ledger));
        let payments = Payments::new(store, Arc::new(SystemClock), Arc::new(chains), None);
        Self { _dir: dir, rpc, payer, payments }
    }

    /// `account`'s contract payment `proof_id` from the payer to `to` (its amount, decimals and
    /// fee are its check's), within a sponsorship of `lamports_per_day`.
    fn job(&self, account: &str, to: &Address, proof_id: &str, lamports_per_day: u64) -> ContractPayment {
        let payload = serde_json::from_value(serde_json::json!({
            "x402Version": 1, "scheme": "batch-settlement", "network": self.rpc.network(),
            "payload": {"type": "deposit", "proof": proof_id},
        }))
        .unwrap();
        ContractPayment {
            account: account.into(),
            sponsorship: Sponsorship { lamports_per_day, wei_per_day: 0 },
            network: self.rpc.network().clone(),
            from: Address::Solana(self.payer.pubkey().to_bytes()).to_string(),
            to: to.to_string(),
            token: ("native".into(), 0),
            amount: 0,
            proof_id: proof_id.into(),
            payload,
            fee: None,
            resource: None,
            wait: Duration::from_secs(20),
        }
    }

    /// The payer's signed transfer of `lamports` to `to`, as the check's call, with `amount`.
    async fn prepared(&self, to: &Address, lamports: u64, amount: u128) -> Prepared {
        let Address::Solana(to) = to else { unreachable!("a Solana payee") };
        let (blockhash, horizon) = self.rpc.latest_blockhash().await.unwrap();
        let message =
            Transfer { from: self.payer.pubkey(), to: (*to).into(), lamports, priority_fee: None }.message(&blockhash);
        let tx = solana_sdk::transaction::Transaction::new(&[&self.payer], message, blockhash);
        let call = Presigned { tx_id: tx.signatures[0].to_string(), raw: bincode::serialize(&tx).unwrap(), horizon };
        Prepared { call: Box::new(call), decimals: 9, amount, fee: Some(5_000) }
    }
}

fn payee() -> Address {
    Address::Solana(Keypair::new().pubkey().to_bytes())
}

fn refused(why: &str) -> PaymentError {
    let reason = crate::chains::Reason::Batch(crate::chains::BatchReason::DepositSimulationFailed);
    PaymentError::Refused(crate::chains::Refusal::new(reason, why))
}

/// What the check found is what is recorded and what the chain must move: the amount it asked
/// (the chain moving less fails it), the token's decimals, and the fee counted against the
/// seller's sponsorship before anything is sent.
#[tokio::test]
async fn a_contract_payment_is_recorded_as_its_check_found_it() {
    let l = Ledger::start().await;
    let to = payee();
    let prepared = l.prepared(&to, 1_000_000, 1_000_000).await;
    let paid = l.payments.contract_payment_checked(l.job("acct", &to, "one", 5_000), async { Ok(prepared) }).await;
    let paid = paid.unwrap().payment;
    assert_eq!(paid.status, PaymentStatus::Confirmed);
    assert_eq!((paid.amount_atomic.get(), paid.decimals, paid.asset.as_str()), (1_000_000, 9, "native"));

    // Asked for more than the transaction moves: the chain's verdict fails it.
    let prepared = l.prepared(&to, 1_000_000, 1_000_001).await;
    let short = l.payments.contract_payment_checked(l.job("acct", &to, "two", 10_000), async { Ok(prepared) }).await;
    assert_eq!(short.unwrap().payment.status, PaymentStatus::Failed);

    // Its fee passes what is left of the day's budget: refused before anything is recorded.
    let prepared = l.prepared(&to, 1_000_000, 1_000_000).await;
    let spent = l.payments.contract_payment_checked(l.job("acct", &to, "three", 14_999), async { Ok(prepared) }).await;
    assert!(matches!(spent, Err(PaymentError::SponsorshipSpent { .. })), "{spent:?}");
    assert!(l.payments.store().payment_by_proof("three").await.unwrap().is_none());
}

/// A contract payment already claimed is answered without checking it again: with its payment
/// for its own seller and payload, refused as used for anyone else.
#[tokio::test]
async fn a_claimed_contract_payment_is_not_checked_again() {
    let l = Ledger::start().await;
    let to = payee();
    let prepared = l.prepared(&to, 1_000_000, 1_000_000).await;
    let paid = l
        .payments
        .contract_payment_checked(l.job("acct", &to, "one", 1_000_000), async { Ok(prepared) })
        .await
        .unwrap();
    let unchecked = async { Err(PaymentError::Internal("checked again".into())) };
    let again = l.payments.contract_payment_checked(l.job("acct", &to, "one", 1_000_000), unchecked).await.unwrap();
    assert_eq!(again.payment.id, paid.payment.id);
    let unchecked = async { Err(PaymentError::Internal("checked again".into())) };
    let other = l.payments.contract_payment_checked(l.job("other", &to, "one", 1_000_000), unchecked).await;
    assert!(matches!(other, Err(PaymentError::ProofUsed { .. })), "{other:?}");
}

/// A twin settles the payment while this one is being checked; the chain then refuses this one
/// (its authorization used): it is answered with the twin's payment. Refused with nothing
/// claimed, the refusal is the answer; an error that is not the chain's refusal is not looked
/// up again.
#[tokio::test]
async fn a_refusal_met_while_a_twin_settled_is_answered_with_the_twins_payment() {
    let l = Ledger::start().await;
    let to = payee();
    let prepared = l.prepared(&to, 1_000_000, 1_000_000).await;
    let twin = async {
        let twin = async { Ok(prepared) };
        let twin = l.payments.contract_payment_checked(l.job("acct", &to, "one", 1_000_000), twin).await.unwrap();
        assert_eq!(twin.payment.status, PaymentStatus::Confirmed);
        Err(refused("the authorization is used"))
    };
    let late = l.payments.contract_payment_checked(l.job("acct", &to, "one", 1_000_000), twin).await.unwrap();
    let holder = l.payments.store().payment_by_proof("one").await.unwrap().unwrap();
    assert_eq!((late.payment.id, late.payment.status), (holder.payment.id, PaymentStatus::Confirmed));

    let alone = l
        .payments
        .contract_payment_checked(l.job("acct", &to, "two", 1_000_000), async { Err(refused("fails")) })
        .await;
    assert!(matches!(&alone, Err(PaymentError::Refused(r)) if r.message == "fails"), "{alone:?}");

    let prepared = l.prepared(&to, 1_000_000, 1_000_000).await;
    let twin = async {
        let twin = async { Ok(prepared) };
        l.payments.contract_payment_checked(l.job("acct", &to, "three", 1_000_000), twin).await.unwrap();
        Err(PaymentError::Internal("the node is gone".into()))
    };
    let late = l.payments.contract_payment_checked(l.job("acct", &to, "three", 1_000_000), twin).await;
    assert!(matches!(late, Err(PaymentError::Internal(_))), "{late:?}");
}
