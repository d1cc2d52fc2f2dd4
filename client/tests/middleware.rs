//! The buyer as a `reqwest-middleware` middleware ([`PaymentMiddleware`]), against the demo: a
//! program's own `reqwest` client pays the shop's paid `POST` on the embedded Solana ledger and
//! on anvil, within a budget, and a body that streams is refused before anything is paid.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

use std::sync::Arc;

use tollgate_client::{Budget, Buyer, Limit, PayError, PaymentMade, PaymentMiddleware};

fn pay_error(error: &reqwest_middleware::Error) -> &PayError {
    match error {
        reqwest_middleware::Error::Middleware(e) => e.downcast_ref::<PayError>().unwrap(),
        other => panic!("not a payment error: {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reqwest_client_pays_a_paid_post_within_its_budget() {
    let dir = tempfile::tempdir().unwrap();
    let demo = tollgate_demo::start(&tollgate_demo::Options::new(dir.path())).await.unwrap();
    let key = tollgate_facilitator::wallets::read_solana_keypair(&demo.buyer_key_file).unwrap();
    // Two summaries (0.001 SOL each) fit.
    let budget = Budget::open(&dir.path().join("spend.db"), vec![Limit::parse("0.002SOL", false).unwrap()]).unwrap();
    let buyer = Buyer::new().with_solana(key, &demo.solana_rpc_url).with_budget(budget);
    let http = PaymentMiddleware::client(Arc::new(buyer));
    let url = format!("{}/summarize", demo.shop_url);

    // Free: no payment, no middleware work.
    let free = http.get(format!("{}/", demo.shop_url)).send().await.unwrap();
    assert_eq!(free.status(), 200);
    assert!(free.extensions().get::<PaymentMade>().is_none());

    for text in ["a program pays with its own client", "and pays again"] {
        let answer = http.post(&url).header("content-type", "text/plain").body(text).send().await.unwrap();
        assert_eq!(answer.status(), 200);
        let made = answer.extensions().get::<PaymentMade>().cloned().expect("paid");
        assert_eq!(made.amount.get(), 1_000_000);
        let body: serde_json::Value = answer.json().await.unwrap();
        assert_eq!(body["summary"], text, "the body was sent again with the payment");
        assert_eq!(body["transaction"].as_str(), made.transaction.as_deref());
    }
    let over = http.post(&url).body("over the budget").send().await.unwrap_err();
    assert!(matches!(pay_error(&over), PayError::OverBudget { .. }), "{over}");
    assert_eq!(demo.history(&demo.buyer, "sent").await.unwrap()["total"], 2, "nothing paid over the budget");

    // A body that streams cannot be sent twice: refused at the 402, before paying.
    let chunks = futures_util::stream::iter([Ok::<_, std::io::Error>(bytes::Bytes::from_static(b"streamed"))]);
    let streamed = http.post(&url).body(reqwest::Body::wrap_stream(chunks)).send().await.unwrap_err();
    assert!(matches!(pay_error(&streamed), PayError::Body(_)), "{streamed}");
    assert_eq!(demo.history(&demo.buyer, "sent").await.unwrap()["total"], 2);

    // An offer over the budget gives way to the seller's next one: /report's 0.05 TUSD is over a
    // TUSD budget of 0.01, its 0.01 SOL (within the SOL budget) is paid.
    let key = tollgate_facilitator::wallets::read_solana_keypair(&demo.buyer_key_file).unwrap();
    let tusd = Limit::parse(&format!("0.01@{}", demo.spl_token), false).unwrap();
    let sol = Limit::parse("1SOL/day", false).unwrap();
    let budget = Budget::open(&dir.path().join("tusd.db"), vec![tusd.clone()]).unwrap();
    // With the TUSD limit alone, nothing caps the SOL offer: nothing is paid.
    let buyer = Buyer::new().with_solana(key.insecure_clone(), &demo.solana_rpc_url).with_budget(budget);
    let refused = PaymentMiddleware::client(Arc::new(buyer)).get(format!("{}/report", demo.shop_url)).send().await;
    assert!(refused.unwrap_err().to_string().contains("does not fit the budget"), "the budget's refusal is named");
    let budget = Budget::open(&dir.path().join("tusd.db"), vec![tusd, sol]).unwrap();
    let buyer = Buyer::new().with_solana(key, &demo.solana_rpc_url).with_budget(budget);
    let answer =
        PaymentMiddleware::client(Arc::new(buyer)).get(format!("{}/report", demo.shop_url)).send().await.unwrap();
    assert_eq!(answer.status(), 200);
    let made = answer.extensions().get::<PaymentMade>().cloned().expect("paid");
    assert_eq!((made.asset, made.amount.get()), (tollgate_client::protocol::x402::Asset::Native, 10_000_000));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reqwest_client_pays_a_paid_post_in_eth_on_anvil() {
    let dir = tempfile::tempdir().unwrap();
    let (anvil, demo) = tollgate_demo::start_with_anvil(dir.path()).await.unwrap();
    let evm = demo.evm.clone().unwrap();
    let key: tollgate_client::PrivateKeySigner =
        std::fs::read_to_string(&evm.buyer_key_file).unwrap().trim().parse().unwrap();
    // Only ETH: the SOL offer is not this buyer's (it has no Solana key).
    let buyer = Buyer::new().with_evm(key, &anvil.endpoint()).unwrap().without_cap();
    let http = PaymentMiddleware::client(Arc::new(buyer));
    let answer = http.post(format!("{}/summarize", demo.shop_url)).body("paid in ether").send().await.unwrap();
    assert_eq!(answer.status(), 200);
    let made = answer.extensions().get::<PaymentMade>().cloned().expect("paid");
    assert_eq!(made.network.to_string(), format!("eip155:{}", evm.chain_id));
    assert_eq!(made.amount.get(), 100_000_000_000_000, "0.0001 ETH");
    let body: serde_json::Value = answer.json().await.unwrap();
    assert_eq!(body["words"], 3);
    assert_eq!(demo.history(&evm.buyer, "sent").await.unwrap()["total"], 1);
}

/// A signer of the program's own (here a stand-in for a remote one: it counts what it signs and
/// has a local wallet sign it).
#[derive(Debug)]
struct CountingSigner {
    inner: tollgate_client::wallet::SolanaWallet,
    signed: std::sync::Mutex<Vec<u128>>,
}

#[async_trait::async_trait]
impl tollgate_client::Wallet for CountingSigner {
    fn family(&self) -> tollgate_client::protocol::ChainFamily {
        self.inner.family()
    }
    fn address(&self) -> String {
        self.inner.address()
    }
    async fn decimals(
        &self,
        requirement: &tollgate_client::protocol::x402::PaymentRequirements,
    ) -> Result<Option<u8>, PayError> {
        self.inner.decimals(requirement).await
    }
    async fn prove(
        &self,
        requirement: &tollgate_client::protocol::x402::PaymentRequirements,
        declared: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<tollgate_client::Proof, PayError> {
        self.signed.lock().unwrap().push(requirement.amount.get());
        self.inner.prove(requirement, declared).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_wallet_of_the_programs_own_signs_what_the_buyer_pays() {
    use tollgate_client::Wallet as _;
    let dir = tempfile::tempdir().unwrap();
    let demo = tollgate_demo::start(&tollgate_demo::Options::new(dir.path())).await.unwrap();
    let key = tollgate_facilitator::wallets::read_solana_keypair(&demo.buyer_key_file).unwrap();
    let signer = Arc::new(CountingSigner {
        inner: tollgate_client::wallet::SolanaWallet::new(key, demo.solana_rpc_url.clone()),
        signed: std::sync::Mutex::default(),
    });
    let buyer = Buyer::new().with_wallet(signer.clone()).without_cap();
    assert_eq!(buyer.solana_address().as_deref(), Some(demo.buyer.as_str()));
    let http = PaymentMiddleware::client(Arc::new(buyer));
    let answer = http.get(format!("{}/quote", demo.shop_url)).send().await.unwrap();
    assert_eq!(answer.status(), 200);
    assert!(answer.extensions().get::<PaymentMade>().is_some());
    assert_eq!(*signer.signed.lock().unwrap(), [1_000_000], "the program's signer made the one proof");
    assert_eq!(signer.address(), demo.buyer);
}
