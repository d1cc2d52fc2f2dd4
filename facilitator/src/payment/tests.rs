//! The payment core against the embedded ledger, for what only this crate can see: how often a
//! proof's transaction is decoded on its way through (once per request).

use std::sync::Arc;
use std::time::Duration;

use solana_sdk::signature::Keypair;
use solana_sdk::signer::Signer as _;
use tollgate_protocol::gateway::PaymentStatus;
use tollgate_protocol::x402::{Asset, PaymentPayload};
use tollgate_protocol::{Address, Network};

use super::{Payments, Receive, Repeat};
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
