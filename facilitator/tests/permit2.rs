//! x402 `exact` through Permit2 and `upto`, on a real anvil running the real Permit2 (its
//! published bytecode, installed by `scripts/test` from the npm registry) and the x402 proxies
//! at their canonical addresses. The attacks come first: another spender, recipient, token,
//! amount, window or signer; a used nonce; an allowance revoked between verify and settle; an
//! upto charge above the most allowed, or settled by another facilitator; twice, and at once.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

use crate::common;

use alloy::primitives::{Address, U256};
use alloy::signers::local::PrivateKeySigner;
use common::evm::EvmApp;
use common::permit2::{Approval, P2Token, Permit, body, install, requirement};
use common::rpc_proxy::calls_since;
use http::StatusCode;
use serde_json::{Value, json};
use tollgate_encoding::permit2::{EXACT_PROXY, PERMIT2, UPTO_PROXY};
use tollgate_facilitator::devnet::TokenKind;

fn reason(v: &Value) -> String {
    v["invalidReason"].as_str().or_else(|| v["errorReason"].as_str()).unwrap_or_default().to_owned()
}

/// A facilitator on anvil with Permit2, a plain ERC-20, and a buyer holding 10 of it who has
/// approved Permit2.
async fn setup() -> (EvmApp, String, P2Token, PrivateKeySigner) {
    let t = EvmApp::start().await;
    install(&t).await;
    let (key, _) = t.customer().await;
    let token = P2Token::deploy(&t, TokenKind::Plain, "Plain USD").await;
    let buyer = PrivateKeySigner::random();
    token.mint(&t, buyer.address(), 10_000_000).await;
    token.approve_permit2(&t, &buyer, U256::MAX).await;
    (t, key, token, buyer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permit2_exact_pays_any_erc20_once_and_refuses_what_it_does_not_bind() {
    let (t, key, token, buyer) = setup().await;
    let chain = t.anvil.chain_id();
    let seller = Address::repeat_byte(0x51);
    let req = requirement(&t, "exact", token.address(), seller, 1_000_000);
    let verify = |payload: Value| body(&req, &req, payload, json!({}));

    // Attacks, each refused at verify and moving nothing.
    let good = Permit::exact(token.address(), 1_000_000, seller);
    let other_token = P2Token::deploy(&t, TokenKind::Plain, "Other").await;
    let now = chrono::Utc::now().timestamp().unsigned_abs();
    let forger = PrivateKeySigner::random();
    let mut tampered = good.signed(&buyer, chain);
    tampered["permit2Authorization"]["witness"]["to"] = json!(Address::repeat_byte(0x66).to_string());
    let mut inflated = good.signed(&buyer, chain);
    inflated["permit2Authorization"]["from"] = json!(forger.address().to_string());
    for (payload, why) in [
        (Permit { spender: UPTO_PROXY, ..good.clone() }.signed(&buyer, chain), "invalid_permit2_spender"),
        (Permit { spender: seller, ..good.clone() }.signed(&buyer, chain), "invalid_permit2_spender"),
        (
            Permit { to: Address::repeat_byte(0x66), ..good.clone() }.signed(&buyer, chain),
            "invalid_permit2_recipient_mismatch",
        ),
        (tampered, "invalid_permit2_recipient_mismatch"),
        (Permit { token: other_token.address(), ..good.clone() }.signed(&buyer, chain), "permit2_token_mismatch"),
        (Permit { amount: 999_999, ..good.clone() }.signed(&buyer, chain), "permit2_amount_mismatch"),
        (Permit { amount: 1_000_001, ..good.clone() }.signed(&buyer, chain), "permit2_amount_mismatch"),
        (Permit { deadline: now + 5, ..good.clone() }.signed(&buyer, chain), "permit2_deadline_expired"),
        (Permit { valid_after: now + 600, ..good.clone() }.signed(&buyer, chain), "permit2_not_yet_valid"),
        (good.signed(&forger, chain), "permit2_insufficient_balance"),
        (inflated, "invalid_permit2_signature"),
        (good.signed(&buyer, chain + 1), "invalid_permit2_signature"),
        (Permit { facilitator: Some(seller), ..good.clone() }.signed(&buyer, chain), "invalid_payload"),
    ] {
        let (s, v) = t.call("POST", "/verify", &key, Some(verify(payload.clone()))).await;
        assert_eq!((s, v["isValid"].as_bool(), reason(&v)), (StatusCode::OK, Some(false), why.to_owned()), "{v}");
        let (_, v) = t.call("POST", "/settle", &key, Some(verify(payload))).await;
        assert_eq!((v["success"].as_bool(), reason(&v)), (Some(false), why.to_owned()), "{v}");
    }
    // A cheaper request's permit presented for a dearer one: whether the payload says it
    // accepted the cheaper requirement or claims the dearer one, refused.
    let dear = requirement(&t, "exact", token.address(), seller, 2_000_000);
    let cheap = good.signed(&buyer, chain);
    for (accepted, why) in [(&req, "invalid_payment_requirements"), (&dear, "permit2_amount_mismatch")] {
        let (_, v) = t.call("POST", "/settle", &key, Some(body(accepted, &dear, cheap.clone(), json!({})))).await;
        assert_eq!((v["success"].as_bool(), reason(&v)), (Some(false), why.to_owned()), "{v}");
    }
    assert_eq!(token.balance(&t, seller).await, 0, "nothing moved");

    // The good permit: verified, then settled once, for exactly the price.
    let payload = good.signed(&buyer, chain);
    let (_, v) = t.call("POST", "/verify", &key, Some(verify(payload.clone()))).await;
    assert_eq!((v["isValid"].as_bool(), v["payer"].as_str()), (Some(true), Some(&*buyer.address().to_string())), "{v}");
    let (_, s1) = t.call("POST", "/settle", &key, Some(verify(payload.clone()))).await;
    assert_eq!((s1["success"].as_bool(), s1["amount"].as_str()), (Some(true), Some("1000000")), "{s1}");
    assert_eq!(token.balance(&t, seller).await, 1_000_000);
    assert_eq!(token.balance(&t, buyer.address()).await, 9_000_000);
    // Again: the same settlement (x402 settle is idempotent for its seller), no second transfer.
    let (_, s2) = t.call("POST", "/settle", &key, Some(verify(payload.clone()))).await;
    assert_eq!(s2["transaction"], s1["transaction"], "{s2}");
    assert_eq!(token.balance(&t, seller).await, 1_000_000, "paid once");
    // The used proof no longer verifies; a new permit re-using its nonce is the same proof.
    let (_, v) = t.call("POST", "/verify", &key, Some(verify(payload))).await;
    assert_eq!(v["isValid"].as_bool(), Some(false), "{v}");
    let reused = Permit { to: seller, amount: 1_000_000, ..good.clone() }.signed(&buyer, chain);
    let (_, v) = t.call("POST", "/verify", &key, Some(verify(reused))).await;
    assert_eq!(v["isValid"].as_bool(), Some(false), "{v}");

    // A nonce Permit2 spent outside this facilitator: named.
    let spent = Permit::exact(token.address(), 1_000_000, seller);
    spend_nonce_elsewhere(&t, &buyer, &token, &spent).await;
    let (_, v) = t.call("POST", "/verify", &key, Some(verify(spent.signed(&buyer, chain)))).await;
    assert_eq!(reason(&v), "permit2_invalid_nonce", "{v}");

    // Eight settlements of one permit at once: one transfer.
    let raced = good_permit(&token, seller).signed(&buyer, chain);
    let before = token.balance(&t, seller).await;
    let calls = (0..8).map(|_| t.call("POST", "/settle", &key, Some(verify(raced.clone()))));
    let answers = futures_util::future::join_all(calls).await;
    let transactions: std::collections::BTreeSet<_> =
        answers.iter().filter(|(_, v)| v["success"] == true).map(|(_, v)| v["transaction"].to_string()).collect();
    assert!(transactions.len() <= 1, "{answers:?}");
    assert_eq!(token.balance(&t, seller).await, before + 1_000_000, "one transfer: {answers:?}");
}

fn good_permit(token: &P2Token, seller: Address) -> Permit {
    Permit::exact(token.address(), 1_000_000, seller)
}

/// The buyer spends `permit`'s nonce on Permit2 itself (its `invalidateUnorderedNonces`).
async fn spend_nonce_elsewhere(t: &EvmApp, buyer: &PrivateKeySigner, _token: &P2Token, permit: &Permit) {
    alloy::sol! {
        interface Nonces {
            function invalidateUnorderedNonces(uint256 wordPos, uint256 mask) external;
        }
    }
    use alloy::sol_types::SolCall as _;
    let (word, bit) = tollgate_encoding::permit2::nonce_position(permit.nonce);
    let data =
        Nonces::invalidateUnorderedNoncesCall { wordPos: word, mask: U256::from(1) << usize::from(bit) }.abi_encode();
    tollgate_facilitator::devnet::send_evm(&t.backend().rpc, buyer, alloy::primitives::TxKind::Call(PERMIT2), data)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_allowance_is_named_and_an_eip2612_permit_grants_it_in_the_settlement() {
    let t = EvmApp::start().await;
    install(&t).await;
    let (key, _) = t.customer().await;
    let chain = t.anvil.chain_id();
    let token = P2Token::deploy(&t, TokenKind::Eip2612, "Permit USD").await;
    let buyer = PrivateKeySigner::random();
    token.mint(&t, buyer.address(), 5_000_000).await;
    let seller = Address::repeat_byte(0x52);
    let req = requirement(&t, "exact", token.address(), seller, 1_000_000);
    let permit = Permit::exact(token.address(), 1_000_000, seller);
    let payload = permit.signed(&buyer, chain);

    // No allowance to Permit2, no EIP-2612 permit offered: named, so the seller can answer 412.
    let (_, v) = t.call("POST", "/verify", &key, Some(body(&req, &req, payload.clone(), json!({})))).await;
    assert_eq!(reason(&v), "permit2_allowance_required", "{v}");

    // An EIP-2612 permit for another spender, another owner, or another amount: refused.
    let deadline = permit.deadline;
    for (extensions, why) in [
        (token.eip2612(&t, &buyer, EXACT_PROXY, 1_000_000, deadline), "eip2612_spender_not_permit2"),
        (token.eip2612(&t, &PrivateKeySigner::random(), PERMIT2, 1_000_000, deadline), "eip2612_from_mismatch"),
        (token.eip2612(&t, &buyer, PERMIT2, 2_000_000, deadline), "invalid_eip2612_extension_format"),
        (
            json!({"eip2612GasSponsoring": {"info": {"from": "nobody", "signature": "0x00"}}}),
            "invalid_eip2612_extension_format",
        ),
        // The seller's declaration echoed back (as x402 clients do) offers no permit.
        (
            json!({"eip2612GasSponsoring": {"info": {"description": "echoed", "version": "1"}}}),
            "permit2_allowance_required",
        ),
    ] {
        let (_, v) = t.call("POST", "/verify", &key, Some(body(&req, &req, payload.clone(), extensions))).await;
        assert_eq!(reason(&v), why, "{v}");
    }

    // The buyer's EIP-2612 permit: verified, and settled by settleWithPermit with no ETH of its own.
    let sponsored = token.eip2612(&t, &buyer, PERMIT2, 1_000_000, deadline);
    let (_, v) = t.call("POST", "/verify", &key, Some(body(&req, &req, payload.clone(), sponsored.clone()))).await;
    assert_eq!(v["isValid"].as_bool(), Some(true), "{v}");
    let (_, s) = t.call("POST", "/settle", &key, Some(body(&req, &req, payload, sponsored))).await;
    assert_eq!(s["success"].as_bool(), Some(true), "{s}");
    assert_eq!(token.balance(&t, seller).await, 1_000_000);
    assert_eq!(t.balance(&buyer.address().to_string()).await, 0, "the buyer paid no gas");

    // An allowance revoked between verify and settle: refused at settlement, nothing recorded or moved.
    let plain = P2Token::deploy(&t, TokenKind::Plain, "Plain USD").await;
    plain.mint(&t, buyer.address(), 5_000_000).await;
    plain.approve_permit2(&t, &buyer, U256::MAX).await;
    let req = requirement(&t, "exact", plain.address(), seller, 1_000_000);
    let payload = Permit::exact(plain.address(), 1_000_000, seller).signed(&buyer, chain);
    let (_, v) = t.call("POST", "/verify", &key, Some(body(&req, &req, payload.clone(), json!({})))).await;
    assert_eq!(v["isValid"].as_bool(), Some(true), "{v}");
    plain.approve_permit2(&t, &buyer, U256::ZERO).await;
    let (_, s) = t.call("POST", "/settle", &key, Some(body(&req, &req, payload, json!({})))).await;
    assert_eq!((s["success"].as_bool(), reason(&s)), (Some(false), "permit2_allowance_required".to_owned()), "{s}");
    assert_eq!(plain.balance(&t, seller).await, 0);
    let (_, history) = t.call("GET", &format!("/payment/history/{seller}"), &key, None).await;
    assert_eq!(history["payments"].as_array().map(Vec::len), Some(1), "only the settled one: {history}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upto_charges_what_was_used_never_more_than_allowed_and_only_by_its_facilitator() {
    let (t, key, token, buyer) = setup().await;
    let chain = t.anvil.chain_id();
    let facilitator = t.backend().signer.as_ref().unwrap().0.address();
    let seller = Address::repeat_byte(0x53);
    let most = requirement(&t, "upto", token.address(), seller, 1_000_000);
    let charge = |amount: u128| {
        let mut r = most.clone();
        r["amount"] = json!(amount.to_string());
        r
    };

    // /supported lists upto (v2 only) with the account its witness must name, and the extension.
    let (_, supported) = t.call("GET", "/supported", &key, None).await;
    let network = t.network().to_string();
    let upto: Vec<_> = supported["kinds"].as_array().unwrap().iter().filter(|k| k["scheme"] == "upto").collect();
    assert_eq!(upto.len(), 1, "{supported}");
    assert_eq!((upto[0]["network"].as_str(), upto[0]["x402Version"].as_u64()), (Some(&*network), Some(2)));
    assert_eq!(upto[0]["extra"]["facilitatorAddress"], facilitator.to_string());
    assert!(supported["extensions"].as_array().unwrap().contains(&json!("eip2612GasSponsoring")), "{supported}");

    // Another facilitator named in the witness, or the exact proxy: refused.
    let permit = Permit::upto(token.address(), 1_000_000, seller, facilitator);
    let elsewhere = Permit { facilitator: Some(Address::repeat_byte(0x77)), ..permit.clone() }.signed(&buyer, chain);
    let (_, v) = t.call("POST", "/verify", &key, Some(body(&most, &most, elsewhere, json!({})))).await;
    assert_eq!(reason(&v), "upto_facilitator_mismatch", "{v}");
    let exact_proxy = Permit { spender: EXACT_PROXY, ..permit.clone() }.signed(&buyer, chain);
    let (_, v) = t.call("POST", "/verify", &key, Some(body(&most, &most, exact_proxy, json!({})))).await;
    assert_eq!(reason(&v), "invalid_permit2_spender", "{v}");
    // A verify is for the most: a permit of less is refused there.
    let less = Permit { amount: 500_000, ..permit.clone() }.signed(&buyer, chain);
    let (_, v) = t.call("POST", "/verify", &key, Some(body(&most, &most, less, json!({})))).await;
    assert_eq!(reason(&v), "permit2_amount_mismatch", "{v}");

    let payload = permit.signed(&buyer, chain);
    let (_, v) = t.call("POST", "/verify", &key, Some(body(&most, &most, payload.clone(), json!({})))).await;
    assert_eq!(v["isValid"].as_bool(), Some(true), "{v}");
    // Above the most: refused, nothing moved.
    let (_, s) =
        t.call("POST", "/settle", &key, Some(body(&most, &charge(1_000_001), payload.clone(), json!({})))).await;
    assert_eq!(reason(&s), "invalid_upto_evm_payload_settlement_exceeds_amount", "{s}");
    // Nothing used: success, no transaction, nothing moved or recorded.
    let (_, s) = t.call("POST", "/settle", &key, Some(body(&most, &charge(0), payload.clone(), json!({})))).await;
    assert_eq!(
        (s["success"].as_bool(), s["transaction"].as_str(), s["amount"].as_str()),
        (Some(true), Some(""), Some("0")),
        "{s}"
    );
    assert_eq!(token.balance(&t, seller).await, 0);
    // 400,000 used: exactly that moves, once.
    let (_, s) = t.call("POST", "/settle", &key, Some(body(&most, &charge(400_000), payload.clone(), json!({})))).await;
    assert_eq!((s["success"].as_bool(), s["amount"].as_str()), (Some(true), Some("400000")), "{s}");
    assert_eq!(token.balance(&t, seller).await, 400_000);
    assert_eq!(token.balance(&t, buyer.address()).await, 9_600_000);
    // Charging the same permit again, for another amount: refused (Permit2 spends a nonce once).
    let (_, s) = t.call("POST", "/settle", &key, Some(body(&most, &charge(600_000), payload.clone(), json!({})))).await;
    assert_eq!(s["success"].as_bool(), Some(false), "{s}");
    assert_eq!(token.balance(&t, seller).await, 400_000, "charged once");

    // Concurrent charges of one fresh permit: one transfer.
    let raced = Permit::upto(token.address(), 1_000_000, seller, facilitator).signed(&buyer, chain);
    let calls = (0..6)
        .map(|i| t.call("POST", "/settle", &key, Some(body(&most, &charge(100_000 + i), raced.clone(), json!({})))));
    let answers = futures_util::future::join_all(calls).await;
    let won: Vec<_> = answers.iter().filter(|(_, v)| v["success"] == true).collect();
    assert_eq!(won.len(), 1, "{answers:?}");
    let charged: u128 = won[0].1["amount"].as_str().unwrap().parse().unwrap();
    assert_eq!(token.balance(&t, seller).await, 400_000 + charged, "{answers:?}");
}

/// The hot path, as for EIP-3009: once the token's decimals are known, a Permit2 verify is one
/// `eth_call` (the proxy's settle simulated from the facilitator's account), a settlement one
/// `eth_estimateGas` before sending; the reasons are read only when it fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit2_verify_is_one_call_and_a_settlement_one_estimate() {
    let t = EvmApp::start_behind_proxy().await;
    install(&t).await;
    let proxy = t.proxy.as_ref().unwrap();
    let (key, _) = t.customer().await;
    let token = P2Token::deploy(&t, TokenKind::Plain, "Plain USD").await;
    let buyer = PrivateKeySigner::random();
    token.mint(&t, buyer.address(), 10_000_000).await;
    token.approve_permit2(&t, &buyer, U256::MAX).await;
    let seller = Address::repeat_byte(0x54);
    let req = requirement(&t, "exact", token.address(), seller, 1_000_000);
    let signed = |_: u8| body(&req, &req, good_permit(&token, seller).signed(&buyer, t.anvil.chain_id()), json!({}));
    // The first verify of a token also reads its decimals.
    assert_eq!(t.call("POST", "/verify", &key, Some(signed(1))).await.1["isValid"], json!(true));
    let paid = signed(2);
    let before = proxy.all_calls();
    let (_, v) = t.call("POST", "/verify", &key, Some(paid.clone())).await;
    assert_eq!(v["isValid"], json!(true), "{v}");
    assert_eq!(calls_since(&before, &proxy.all_calls()), [("eth_call".to_owned(), 1)].into(), "one verify, one call");
    let before = proxy.all_calls();
    let (_, s) = t.call("POST", "/settle", &key, Some(paid)).await;
    assert_eq!(s["success"], json!(true), "{s}");
    let calls = calls_since(&before, &proxy.all_calls());
    assert_eq!((calls.get("eth_call"), calls.get("eth_estimateGas")), (None, Some(&1)), "{calls:?}");
    assert_eq!(token.balance(&t, seller).await, 1_000_000);
}

/// A storage fault injected (by a SQLite trigger) at each write of an upto settlement: the
/// seller's /settle fails, and afterwards — the reconciler's pass, then the seller's retry of the
/// same settle — the permit has moved its charge once, and the retry is answered with that one
/// settlement; never a charge recorded that did not move, nor a second one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storage_fault_at_any_step_of_an_upto_settlement_leaves_it_charged_once() {
    let (t, key, token, buyer) = setup().await;
    let chain = t.anvil.chain_id();
    let seller = Address::repeat_byte(0x53);
    let facilitator = t.backend().signer.as_ref().unwrap().0.address();
    let most = requirement(&t, "upto", token.address(), seller, 50_000);
    let mut charged = most.clone();
    charged["amount"] = json!("20000");
    let mut paid = 0;
    for (step, when) in common::FAULT_STEPS {
        let permit = Permit::upto(token.address(), 50_000, seller, facilitator).signed(&buyer, chain);
        let settle = body(&most, &charged, permit, json!({}));
        common::sqlite(
            &t.db_path(),
            &format!("CREATE TRIGGER fault {when} BEGIN SELECT RAISE(ABORT, 'injected fault'); END"),
        )
        .await;
        let (s, v) = t.call("POST", "/settle", &key, Some(settle.clone())).await;
        assert!(s == StatusCode::INTERNAL_SERVER_ERROR || v["success"] == json!(false), "{step}: {s} {v}");
        common::sqlite(&t.db_path(), "DROP TRIGGER fault").await;

        common::reconcile_in(&*t.store, &t.state.chains, chrono::Duration::hours(1)).await;
        let (s, v) = t.call("POST", "/settle", &key, Some(settle)).await;
        assert_eq!(
            (s, v["success"].as_bool(), v["amount"].as_str()),
            (StatusCode::OK, Some(true), Some("20000")),
            "{step}: {v}"
        );
        paid += 20_000;
        assert_eq!(token.balance(&t, seller).await, paid, "{step}: charged exactly once");
        let (_, history) = t.call("GET", &format!("/payment/history/{seller}?type=received"), &key, None).await;
        assert_eq!(
            history["total"].as_u64(),
            Some(u64::try_from(paid / 20_000).unwrap()),
            "{step}: one record per charge: {history}"
        );
    }
    assert_eq!(token.balance(&t, buyer.address()).await, 10_000_000 - paid);
}

/// A payer without a Permit2 allowance offers its own signed approval of Permit2
/// (`erc20ApprovalGasSponsoring`): another spender, owner, signer, token, a smaller amount, a
/// nonce not its next, or no ETH for its gas are refused at verify; the right one is verified,
/// then broadcast and mined before the settlement, which moves the price once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_approval_offered_by_the_payer_is_sent_before_its_settlement() {
    let t = EvmApp::start().await;
    install(&t).await;
    let (key, _) = t.customer().await;
    let token = P2Token::deploy(&t, TokenKind::Plain, "Plain USD").await;
    let other = P2Token::deploy(&t, TokenKind::Plain, "Other USD").await;
    let buyer = PrivateKeySigner::random();
    token.mint(&t, buyer.address(), 10_000_000).await;
    let chain = t.anvil.chain_id();
    let seller = Address::repeat_byte(0x55);
    let req = requirement(&t, "exact", token.address(), seller, 1_000_000);
    let permit = Permit::exact(token.address(), 1_000_000, seller).signed(&buyer, chain);
    let verify = |extensions: Value| body(&req, &req, permit.clone(), extensions);

    // No ETH for the approval's gas: refused (this facilitator does not fund it).
    let approval = token.signed_approval(&t, &buyer, Approval::of_permit2()).await;
    let (_, v) = t.call("POST", "/verify", &key, Some(verify(approval))).await;
    assert_eq!(reason(&v), "erc20_approval_tx_failed", "{v}");
    t.fund(&buyer.address().to_string(), common::evm::ETH).await;

    let stranger = PrivateKeySigner::random();
    let cases = [
        (Approval { spender: EXACT_PROXY, ..Approval::of_permit2() }, "erc20_approval_spender_not_permit2"),
        (Approval { approved: EXACT_PROXY, ..Approval::of_permit2() }, "erc20_approval_spender_not_permit2"),
        (Approval { value: U256::from(999_999), ..Approval::of_permit2() }, "erc20_approval_tx_invalid_calldata"),
        (Approval { target: Some(other.address()), ..Approval::of_permit2() }, "erc20_approval_asset_mismatch"),
        (Approval { signer: Some(&stranger), ..Approval::of_permit2() }, "erc20_approval_tx_signer_mismatch"),
        (Approval { nonce: Some(5), ..Approval::of_permit2() }, "erc20_approval_tx_failed"),
        // One that could never be mined (below the base fee) would hold the settlement in vain.
        (Approval { max_fee: Some(1), ..Approval::of_permit2() }, "erc20_approval_tx_failed"),
    ];
    for (offer, why) in cases {
        let approval = token.signed_approval(&t, &buyer, offer).await;
        let (_, v) = t.call("POST", "/verify", &key, Some(verify(approval))).await;
        assert_eq!((v["isValid"].as_bool(), reason(&v)), (Some(false), why.to_owned()), "{v}");
    }
    let garbage = json!({"erc20ApprovalGasSponsoring": {"info": {"signedTransaction": "0x02f8", "from": "x"}}});
    let (_, v) = t.call("POST", "/verify", &key, Some(verify(garbage))).await;
    assert_eq!(reason(&v), "invalid_erc20_approval_extension_format", "{v}");
    assert_eq!(token.balance(&t, seller).await, 0);

    // The payer's own approval: verified without an allowance, sent first, then the settlement.
    let approval = token.signed_approval(&t, &buyer, Approval::of_permit2()).await;
    let (_, v) = t.call("POST", "/verify", &key, Some(verify(approval.clone()))).await;
    assert_eq!(v["isValid"], true, "{v}");
    // Settled by four requests at once: the approval sent (and mined) once, the price moved once.
    let answers =
        futures_util::future::join_all((0..4).map(|_| t.call("POST", "/settle", &key, Some(verify(approval.clone())))))
            .await;
    let settled: std::collections::BTreeSet<&str> =
        answers.iter().filter(|(_, v)| v["success"] == true).map(|(_, v)| v["transaction"].as_str().unwrap()).collect();
    assert_eq!(settled.len(), 1, "{answers:?}");
    assert_eq!(token.balance(&t, seller).await, 1_000_000, "paid once");
    let rpc = t.direct_rpc().await;
    assert_eq!(rpc.mined_nonce(buyer.address()).await.unwrap(), 1, "the payer's approval, sent once");
    // Again: the permit is used, the approval mined; nothing more moves.
    let (_, v) = t.call("POST", "/settle", &key, Some(verify(approval.clone()))).await;
    assert!(v["success"] == true || reason(&v) == "permit2_invalid_nonce", "{v}");
    assert_eq!(token.balance(&t, seller).await, 1_000_000, "paid once");
    assert_eq!(token.balance(&t, buyer.address()).await, 9_000_000);
    // The allowance revoked; a new permit offering the approval mined before: refused.
    token.approve_permit2(&t, &buyer, U256::ZERO).await;
    let renewed = Permit::exact(token.address(), 1_000_000, seller).signed(&buyer, chain);
    let (_, v) = t.call("POST", "/verify", &key, Some(body(&req, &req, renewed, approval))).await;
    assert_eq!(reason(&v), "permit2_allowance_required", "{v}");

    // A storage fault when the settlement is claimed, after the approval was sent and mined: the
    // retry finds the allowance and settles as any other; paid once.
    let approval = token.signed_approval(&t, &buyer, Approval::of_permit2()).await;
    let permit = Permit::exact(token.address(), 1_000_000, seller).signed(&buyer, chain);
    let settle = body(&req, &req, permit, approval);
    let (_, claim) = common::FAULT_STEPS[0];
    common::sqlite(
        &t.db_path(),
        &format!("CREATE TRIGGER fault {claim} BEGIN SELECT RAISE(ABORT, 'injected fault'); END"),
    )
    .await;
    let (s, v) = t.call("POST", "/settle", &key, Some(settle.clone())).await;
    assert!(s == StatusCode::INTERNAL_SERVER_ERROR || v["success"] == false, "{s} {v}");
    common::sqlite(&t.db_path(), "DROP TRIGGER fault").await;
    assert_eq!(token.balance(&t, seller).await, 1_000_000, "nothing moved by the failed attempt");
    let (_, v) = t.call("POST", "/settle", &key, Some(settle)).await;
    assert_eq!(v["success"], true, "{v}");
    assert_eq!(token.balance(&t, seller).await, 2_000_000, "paid once more, once");
}

/// Attacks found by the attacker pass: a settled permit's payer and nonce (public on chain once
/// settled) presented again with a forged signature is not answered with that settlement, on
/// x402 /settle nor on the gateway (which names no payment to follow); a payer that is a wallet
/// contract accepting any signature only at a zero gas price (as simulations run by default)
/// costs the facilitator no reverted transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_repeat_of_a_settled_permit_and_a_gas_price_trap_are_refused() {
    use alloy::providers::Provider as _;
    let (t, key, token, buyer) = setup().await;
    let chain = t.anvil.chain_id();
    let seller = Address::repeat_byte(0x56);
    let req = requirement(&t, "exact", token.address(), seller, 1_000_000);
    let good = Permit::exact(token.address(), 1_000_000, seller).signed(&buyer, chain);
    let (_, v) = t.call("POST", "/settle", &key, Some(body(&req, &req, good.clone(), json!({})))).await;
    assert_eq!(v["success"], true, "{v}");
    // The same proof again (a seller's retry): answered with its settlement.
    let (_, again) = t.call("POST", "/settle", &key, Some(body(&req, &req, good.clone(), json!({})))).await;
    assert_eq!((again["success"].as_bool(), &again["transaction"]), (Some(true), &v["transaction"]), "{again}");
    // Its payer and nonce with another signature: used, not answered.
    let mut forged = good.clone();
    forged["signature"] = json!(format!("0x{}", "ab".repeat(65)));
    let (_, v) = t.call("POST", "/settle", &key, Some(body(&req, &req, forged.clone(), json!({})))).await;
    assert_eq!((v["success"].as_bool(), reason(&v)), (Some(false), "duplicate_settlement".to_owned()), "{v}");
    let header = tollgate_protocol::x402::header::encode(&json!({"x402Version": 2, "accepted": req, "payload": forged,
        "resource": {"url": "https://seller.example/report", "description": "", "mimeType": ""}}))
    .unwrap();
    let seller_wallet = seller.to_string();
    let receive = json!({"walletAddress": seller_wallet, "paymentProof": header, "expectedAmount": 1,
        "network": t.network().to_string(), "asset": token.address().to_string(),
        "resource": "https://seller.example/report", "method": "GET"});
    let (s, e) = t.call("POST", "/payment/receive", &key, Some(receive)).await;
    assert_eq!(s, StatusCode::PAYMENT_REQUIRED, "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("already used"), "{e}");
    assert!(e["error"].get("paymentId").is_none_or(Value::is_null), "no payment named to follow: {e}");
    assert_eq!(token.balance(&t, seller).await, 1_000_000, "paid once");
    // A payer without Permit2's allowance, through the gateway: the reason leads its message,
    // for a seller's layer to answer 412 as x402 servers do.
    let unapproved = PrivateKeySigner::random();
    token.mint(&t, unapproved.address(), 1_000_000).await;
    let permit = Permit::exact(token.address(), 1_000_000, seller).signed(&unapproved, chain);
    let header = tollgate_protocol::x402::header::encode(&json!({"x402Version": 2, "accepted": req, "payload": permit,
        "resource": {"url": "https://seller.example/report", "description": "", "mimeType": ""}}))
    .unwrap();
    let receive = json!({"walletAddress": seller_wallet, "paymentProof": header, "expectedAmount": 1,
        "network": t.network().to_string(), "asset": token.address().to_string(),
        "resource": "https://seller.example/report", "method": "GET"});
    let (s, e) = t.call("POST", "/payment/receive", &key, Some(receive)).await;
    assert_eq!(s, StatusCode::PAYMENT_REQUIRED, "{e}");
    assert!(e["error"]["message"].as_str().unwrap().starts_with("permit2_allowance_required: "), "{e}");

    // A wallet contract that accepts any signature only while tx.gasprice is 0.
    let wallet = Address::repeat_byte(0x77);
    let rpc = t.backend().rpc.clone();
    let provider = rpc.provider();
    let code = "0x3a15600a57600080fd005b631626ba7e60e01b60005260206000f3";
    let _: Value = provider.raw_request("anvil_setCode".into(), (wallet, code)).await.unwrap();
    token.mint(&t, wallet, 1_000_000).await;
    t.fund(&wallet.to_string(), common::evm::ETH).await;
    let _: Value = provider.raw_request("anvil_impersonateAccount".into(), (wallet,)).await.unwrap();
    let approve = alloy::sol_types::SolCall::abi_encode(&tollgate_encoding::permit2::Erc20::approveCall {
        spender: PERMIT2,
        value: U256::MAX,
    });
    let tx = alloy::rpc::types::TransactionRequest::default()
        .from(wallet)
        .to(token.address())
        .input(alloy::primitives::Bytes::from(approve).into());
    let sent = provider.send_transaction(tx).await.unwrap();
    sent.get_receipt().await.unwrap();
    let facilitator = t.backend().signer.as_ref().unwrap().0.address();
    let nonce_before = rpc.mined_nonce(facilitator).await.unwrap();
    for _ in 0..3 {
        let mut trap = Permit::exact(token.address(), 1_000_000, seller).signed(&buyer, chain);
        trap["permit2Authorization"]["from"] = json!(wallet.to_string());
        trap["signature"] = json!(format!("0x{}", "00".repeat(65)));
        let (_, v) = t.call("POST", "/settle", &key, Some(body(&req, &req, trap, json!({})))).await;
        assert_eq!(v["success"], false, "{v}");
    }
    assert_eq!(rpc.mined_nonce(facilitator).await.unwrap(), nonce_before, "no settlement sent to revert");
    assert_eq!(token.balance(&t, seller).await, 1_000_000);
}

/// One permit settled by eight requests at once: one settlement is sent, and the account's
/// sponsorship budget counts that one only (the requests that lost the claim give back what
/// they reserved; before, each reserved the most its settlement could cost, and duplicates of
/// one valid permit could spend a seller's day of budget).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_duplicates_of_a_permit_count_one_settlement_against_the_budget() {
    use tollgate_facilitator::store::AccountStore as _;
    let (t, _, token, buyer) = setup().await;
    let (key, wallet) = t.customer().await;
    let account = t.store.get_wallet(&wallet).await.unwrap().unwrap().account_id;
    let chain = t.anvil.chain_id();
    let seller = Address::repeat_byte(0x57);
    let req = requirement(&t, "exact", token.address(), seller, 1_000_000);
    let permit = Permit::exact(token.address(), 1_000_000, seller).signed(&buyer, chain);
    let settle = body(&req, &req, permit, json!({}));
    let answers =
        futures_util::future::join_all((0..8).map(|_| t.call("POST", "/settle", &key, Some(settle.clone())))).await;
    assert!(answers.iter().all(|(s, _)| *s == StatusCode::OK), "{answers:?}");
    assert_eq!(token.balance(&t, seller).await, 1_000_000, "settled once");
    let day = chrono::Utc::now().timestamp().div_euclid(86_400);
    let (spent, largest) = t.store.sponsorship_spent(&account, tollgate_protocol::ChainFamily::Evm, day).await.unwrap();
    assert!(spent > 0 && spent == largest, "one settlement counted: spent {spent}, largest {largest}");
}
