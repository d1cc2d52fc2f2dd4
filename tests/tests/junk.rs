//! The attack of issue 12 through the demo shop: a buyer mints a worthless SPL token, opens the
//! seller's account for it, and pays `/report` (priced 0.05 of the demo's token) with a transfer
//! of his own mint — as a v1 `X-PAYMENT`, as a v2 `PAYMENT-SIGNATURE` that accepted the real
//! offer, and as one that accepted an offer in his own mint. Each is refused: not served,
//! nothing moved, nothing signed by the facilitator, nothing recorded.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

use base64::Engine as _;
use serde_json::{Value, json};
use solana_compute_budget_interface::ComputeBudgetInstruction;
use solana_sdk::instruction::{AccountMeta, Instruction};
use solana_sdk::pubkey::Pubkey;
use solana_sdk::signature::Keypair;
use solana_sdk::signer::Signer as _;
use solana_sdk::transaction::Transaction;
use tollgate_demo::Options;
use tollgate_facilitator::chains::solana::spl::associated_token_address;
use tollgate_facilitator::chains::solana::token::TOKEN_PROGRAM;
use tollgate_facilitator::devnet::SplDevToken;
use tollgate_protocol::x402::header;

/// A `TransferChecked` of `amount` of `mint` (6 decimals) from `buyer` to `seller`'s account,
/// with `fee_payer` to sign as the sponsor, as base64.
fn transfer_of(
    mint: &Pubkey,
    buyer: &Keypair,
    seller: &Pubkey,
    amount: u64,
    fee_payer: &Pubkey,
    blockhash: solana_sdk::hash::Hash,
) -> String {
    let mut data = vec![12];
    data.extend_from_slice(&amount.to_le_bytes());
    data.push(6);
    let transfer = Instruction::new_with_bytes(
        TOKEN_PROGRAM,
        &data,
        vec![
            AccountMeta::new(associated_token_address(&buyer.pubkey(), mint, &TOKEN_PROGRAM), false),
            AccountMeta::new_readonly(*mint, false),
            AccountMeta::new(associated_token_address(seller, mint, &TOKEN_PROGRAM), false),
            AccountMeta::new_readonly(buyer.pubkey(), true),
        ],
    );
    let ixs = [
        ComputeBudgetInstruction::set_compute_unit_limit(20_000),
        ComputeBudgetInstruction::set_compute_unit_price(1),
        transfer,
    ];
    let message = solana_sdk::message::Message::new_with_blockhash(&ixs, Some(fee_payer), &blockhash);
    let mut tx = Transaction::new_unsigned(message);
    tx.partial_sign(&[buyer], blockhash);
    base64::engine::general_purpose::STANDARD.encode(bincode::serialize(&tx).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worthless_token_does_not_buy_the_report() {
    let dir = tempfile::tempdir().unwrap();
    let demo = tollgate_demo::start(&Options::new(dir.path())).await.unwrap();
    let backend = demo.state.chains.embedded_solana().unwrap();
    let rpc = &backend.rpc;
    let sponsor = backend.fee_payer().unwrap();
    let buyer = tollgate_facilitator::wallets::read_solana_keypair(&demo.buyer_key_file).unwrap();
    let seller: Pubkey = demo.seller.parse().unwrap();
    let report = format!("{}/report", demo.shop_url);
    let http = reqwest::Client::new();

    // The shop's offers for /report, in the demo's token: v1 in the body, v2 in the header.
    let asked = http.get(&report).send().await.unwrap();
    assert_eq!(asked.status(), 402);
    let v2: Value = header::decode(asked.headers()["payment-required"].to_str().unwrap()).unwrap();
    let v1: Value = asked.json().await.unwrap();
    let in_token = |offers: &Value| {
        offers["accepts"].as_array().unwrap().iter().find(|o| o["asset"] == demo.spl_token.as_str()).unwrap().clone()
    };
    let (offer_v1, offer_v2) = (in_token(&v1), in_token(&v2));
    let price: u64 = offer_v2["amount"].as_str().unwrap().parse().unwrap();

    // The junk: a mint of the buyer's own, his account full of it, the seller's account opened.
    let authority = Keypair::new();
    let airdrop = rpc.request_airdrop(&authority.pubkey(), 1_000_000_000).await.unwrap();
    rpc.wait_for_outcome(&airdrop, std::time::Duration::from_secs(30)).await.unwrap();
    let junk = SplDevToken::create(rpc, authority, 6).await.unwrap();
    junk.fund(rpc, &buyer.pubkey(), 1_000_000_000).await.unwrap();
    junk.fund(rpc, &seller, 0).await.unwrap();
    let sponsor_sol = rpc.balance(&sponsor).await.unwrap();

    let (blockhash, _) = rpc.latest_blockhash().await.unwrap();
    let tx = transfer_of(&junk.mint, &buyer, &seller, price, &sponsor, blockhash);
    let network = offer_v1["network"].as_str().unwrap();
    let v1_payment = json!({"x402Version": 1, "scheme": "exact", "network": network, "payload": {"transaction": tx}});
    let mut junk_offer = offer_v2.clone();
    junk_offer["asset"] = json!(junk.mint.to_string());
    let v2_payment = |accepted: &Value| json!({"x402Version": 2, "accepted": accepted, "payload": {"transaction": tx}, "resource": v2["resource"]});
    let attempts = [
        ("v1", "x-payment", v1_payment),
        ("v2 accepting the real offer", "payment-signature", v2_payment(&offer_v2)),
        ("v2 accepting an offer in junk", "payment-signature", v2_payment(&junk_offer)),
    ];
    for (what, name, payment) in attempts {
        let answer = http.get(&report).header(name, header::encode(&payment).unwrap()).send().await.unwrap();
        let status = answer.status();
        let body = answer.text().await.unwrap();
        assert_eq!(status, 402, "{what}: served for junk: {body}");
        assert!(!body.contains("\"transaction\""), "{what}: {body}");
    }
    assert_eq!(junk.balance_of(rpc, &seller).await.unwrap(), 0, "no junk moved");
    assert_eq!(rpc.balance(&sponsor).await.unwrap(), sponsor_sol, "the facilitator signed and paid nothing");
    let received = demo.history(&demo.seller, "received").await.unwrap();
    assert_eq!(received["total"], 0, "nothing recorded: {received}");
}
