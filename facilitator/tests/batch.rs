//! x402 `batch-settlement` through the facilitator's `/verify`, on a real anvil with the
//! contracts at their canonical addresses. The attacks come first: a channel for another
//! receiver, token, authorizer or delay; an id that is not its configuration's; a voucher signed
//! by another key, above the escrow, or not above what is claimed; another network; a payload
//! made for a cheaper requirement; a deposit signed by someone else, too large or expired.
//! Each is refused with the scheme's reason; the answers that pass carry the channel.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

use crate::common;

use alloy::primitives::{Address, B256};
use alloy::signers::local::PrivateKeySigner;
use common::batch::World;
use common::evm::x402_v2;
use http::StatusCode;
use serde_json::{Value, json};
use tollgate_encoding::batch::ChannelConfig;

fn reason(v: &Value) -> &str {
    v["invalidReason"].as_str().unwrap_or_default()
}

/// A facilitator on anvil with the contracts; a payer holding 1,000,000 of the token whose
/// vouchers its own key signs; a seller paid into its custodial wallet, whose claims the
/// facilitator authorizes.
struct Shop {
    w: World,
    key: String,
    payer: PrivateKeySigner,
    receiver: Address,
    authorizer: Address,
    config: ChannelConfig,
}

async fn shop() -> Shop {
    shop_on(World::start().await).await
}

async fn shop_on(w: World) -> Shop {
    // The seller is paid into its own custodial wallet here: the facilitator signs its claims.
    let (key, wallet) = w.t.customer().await;
    let payer = PrivateKeySigner::random();
    w.token.mint(&w.t, payer.address(), 1_000_000).await;
    let receiver: Address = wallet.parse().unwrap();
    let authorizer = w.t.backend().signer.as_ref().unwrap().0.address();
    let config = w.config(payer.address(), Address::ZERO, receiver, authorizer, 1);
    Shop { w, key, payer, receiver, authorizer, config }
}

impl Shop {
    async fn verify(&self, requirement: &Value, payload: Value) -> Value {
        let (status, v) = self.w.t.call("POST", "/verify", &self.key, Some(x402_v2(requirement, payload))).await;
        assert_eq!(status, StatusCode::OK, "{v}");
        v
    }

    /// Settles the payer's deposit of `amount` into `config`'s channel (with a voucher of
    /// `max`) for this seller, and checks it was.
    async fn fund(&self, requirement: &Value, config: &ChannelConfig, (amount, max): (u128, u128), salt: u64) {
        let deposit = self.w.deposit_payload(config, &self.payer, &self.payer, (amount, max), salt);
        let (_, v) = self.w.t.call("POST", "/settle", &self.key, Some(x402_v2(requirement, deposit))).await;
        assert_eq!(v["success"], true, "{v}");
    }

    fn requirement(&self) -> Value {
        self.w.requirement(self.receiver, self.authorizer, 1_000)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voucher_passes_only_for_its_sellers_channel_within_what_is_escrowed() {
    let s = shop().await;
    let w = &s.w;
    let req = s.requirement();

    // Nothing escrowed yet: a voucher has nothing to pay from.
    let v = s.verify(&req, w.voucher_payload(&s.config, &s.payer, 1_000)).await;
    assert_eq!(
        (v["isValid"].as_bool(), reason(&v)),
        (Some(false), "invalid_batch_settlement_evm_channel_not_found"),
        "{v}"
    );

    // The payer funds the channel on its own (the contract, sent by anyone).
    let id = s.config.id(w.chain());
    assert!(w.send(&w.relayer, &w.deposit_3009(&s.config, &s.payer, 10_000, id, 1)).await);

    let other = |f: &dyn Fn(&mut ChannelConfig)| {
        let mut c = s.config.clone();
        f(&mut c);
        c
    };
    let stranger = PrivateKeySigner::random();
    let mut forged_id = w.voucher_payload(&s.config, &s.payer, 1_000);
    forged_id["voucher"]["channelId"] = json!(B256::repeat_byte(7).to_string());
    let mut other_network = x402_v2(&req, w.voucher_payload(&s.config, &s.payer, 1_000));
    other_network["paymentPayload"]["accepted"]["network"] = json!("eip155:1");
    for (payload, why) in [
        (w.voucher_payload(&other(&|c| c.receiver = Address::repeat_byte(0x66)), &s.payer, 1_000), "receiver_mismatch"),
        (w.voucher_payload(&other(&|c| c.token = Address::repeat_byte(0x67)), &s.payer, 1_000), "token_mismatch"),
        (
            w.voucher_payload(&other(&|c| c.receiverAuthorizer = stranger.address()), &s.payer, 1_000),
            "receiver_authorizer_mismatch",
        ),
        (
            w.voucher_payload(&other(&|c| c.withdrawDelay = alloy::primitives::Uint::from(901u64)), &s.payer, 1_000),
            "withdraw_delay_mismatch",
        ),
        (forged_id, "channel_id_mismatch"),
        (w.voucher_payload(&s.config, &stranger, 1_000), "voucher_signature"),
        (w.voucher_payload(&s.config, &s.payer, 10_001), "cumulative_exceeds_balance"),
        (json!({"type": "claim", "claims": []}), "claim_payload"),
        (json!({"type": "steal"}), "payload_type"),
        (json!({"type": "voucher", "channelConfig": {}, "voucher": {}}), "voucher_payload"),
    ] {
        let v = s.verify(&req, payload).await;
        assert_eq!(
            (v["isValid"].as_bool(), reason(&v)),
            (Some(false), &*format!("invalid_batch_settlement_evm_{why}")),
            "{why}: {v}"
        );
    }
    let (_, v) = w.t.call("POST", "/verify", &s.key, Some(other_network)).await;
    assert_eq!(reason(&v), "invalid_batch_settlement_evm_network_mismatch", "{v}");
    // A voucher made for a cheaper requirement, presented for this one.
    let cheap = s.w.requirement(s.receiver, s.authorizer, 1);
    let mut body = x402_v2(&cheap, w.voucher_payload(&s.config, &s.payer, 1_000));
    body["paymentRequirements"] = req.clone();
    let (_, v) = w.t.call("POST", "/verify", &s.key, Some(body)).await;
    assert_eq!(reason(&v), "invalid_payment_requirements", "{v}");

    // The voucher passes, with the channel as the chain holds it.
    let v = s.verify(&req, w.voucher_payload(&s.config, &s.payer, 1_000)).await;
    assert_eq!(v["isValid"], true, "{v}");
    assert_eq!(v["payer"].as_str(), Some(&*s.payer.address().to_string()));
    assert_eq!(v["extra"]["channelId"].as_str(), Some(&*id.to_string()));
    assert_eq!((v["extra"]["balance"].as_str(), v["extra"]["totalClaimed"].as_str()), (Some("10000"), Some("0")));
    assert_eq!((v["extra"]["withdrawRequestedAt"].as_u64(), v["extra"]["refundNonce"].as_str()), (Some(0), Some("0")));

    // Once 4,000 are claimed, a voucher must reach past them.
    let claim = common::batch::signed_claim(
        w,
        vec![common::batch::row(&s.config, 4_000, common::batch::voucher(w, &s.payer, id, 4_000), 4_000)],
        &w.t.backend().signer.as_ref().unwrap().0,
    );
    assert!(w.send(&w.relayer, &claim).await);
    let v = s.verify(&req, w.voucher_payload(&s.config, &s.payer, 4_000)).await;
    assert_eq!(reason(&v), "invalid_batch_settlement_evm_cumulative_below_claimed", "{v}");
    let v = s.verify(&req, w.voucher_payload(&s.config, &s.payer, 5_000)).await;
    assert_eq!((v["isValid"].as_bool(), v["extra"]["totalClaimed"].as_str()), (Some(true), Some("4000")), "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposit_passes_only_when_the_payer_signed_it_holds_it_and_it_can_land() {
    let s = shop().await;
    let w = &s.w;
    let req = s.requirement();
    let stranger = PrivateKeySigner::random();

    // Signed by someone else than the payer, more than the payer holds, a voucher past it.
    let v = s.verify(&req, w.deposit_payload(&s.config, &stranger, &s.payer, (5_000, 1_000), 1)).await;
    assert_eq!(reason(&v), "invalid_batch_settlement_evm_receive_authorization_signature", "{v}");
    let v = s.verify(&req, w.deposit_payload(&s.config, &s.payer, &s.payer, (2_000_000, 1_000), 1)).await;
    assert_eq!(reason(&v), "invalid_batch_settlement_evm_insufficient_balance", "{v}");
    let v = s.verify(&req, w.deposit_payload(&s.config, &s.payer, &s.payer, (5_000, 5_001), 1)).await;
    assert_eq!(reason(&v), "invalid_batch_settlement_evm_cumulative_exceeds_balance", "{v}");
    let mut expired = w.deposit_payload(&s.config, &s.payer, &s.payer, (5_000, 1_000), 1);
    expired["deposit"]["authorization"]["erc3009Authorization"]["validBefore"] = json!("1");
    let v = s.verify(&req, expired).await;
    assert_eq!(reason(&v), "invalid_batch_settlement_evm_payload_authorization_valid_before", "{v}");
    // An authorization already used on chain: the simulation says so.
    let used = w.deposit_payload(&s.config, &s.payer, &s.payer, (5_000, 1_000), 9);
    assert!(w.send(&w.relayer, &w.deposit_3009(&s.config, &s.payer, 5_000, s.config.id(w.chain()), 9)).await);
    let v = s.verify(&req, used).await;
    assert_eq!(reason(&v), "invalid_batch_settlement_evm_deposit_simulation_failed", "{v}");

    // A good deposit passes; the channel is read as it is before it.
    let v = s.verify(&req, w.deposit_payload(&s.config, &s.payer, &s.payer, (5_000, 6_000), 2)).await;
    assert_eq!((v["isValid"].as_bool(), v["extra"]["balance"].as_str()), (Some(true), Some("5000")), "{v}");
    assert_eq!(w.channel(s.config.id(w.chain())).await, (5_000, 0), "a verify moves nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposit_settles_once_whoever_asks_how_often_and_the_channel_is_read_back() {
    let s = shop().await;
    let w = &s.w;
    let req = s.requirement();
    let id = s.config.id(w.chain());
    let payload = w.deposit_payload(&s.config, &s.payer, &s.payer, (5_000, 1_000), 3);
    let body = x402_v2(&req, payload.clone());

    // Eight settlements of one deposit at once: one transaction, 5,000 moved once.
    let calls = (0..8).map(|_| w.t.call("POST", "/settle", &s.key, Some(body.clone())));
    let answers = futures_util::future::join_all(calls).await;
    let transactions: std::collections::BTreeSet<_> =
        answers.iter().filter(|(_, v)| v["success"] == true).map(|(_, v)| v["transaction"].to_string()).collect();
    assert_eq!(transactions.len(), 1, "{answers:?}");
    assert_eq!(w.channel(id).await, (5_000, 0));
    assert_eq!(w.balance(s.payer.address()).await, 995_000);
    let (_, v) = answers.iter().find(|(_, v)| v["success"] == true).unwrap();
    assert_eq!(
        (v["amount"].as_str(), v["payer"].as_str()),
        (Some("5000"), Some(&*s.payer.address().to_string())),
        "{v}"
    );
    assert_eq!(v["extra"]["channelState"]["balance"].as_str(), Some("5000"), "{v}");
    assert_eq!(v["extra"]["channelState"]["channelId"].as_str(), Some(&*id.to_string()), "{v}");

    // Settled again by its seller: the same settlement. The facilitator paid the gas once.
    let (_, again) = w.t.call("POST", "/settle", &s.key, Some(body.clone())).await;
    assert_eq!((again["success"].as_bool(), &again["transaction"]), (Some(true), &v["transaction"]), "{again}");
    assert_eq!(w.channel(id).await, (5_000, 0), "paid once");

    // The same authorization with another voucher, or presented by another seller: used.
    let mut twin = payload.clone();
    twin["voucher"] = w.voucher_payload(&s.config, &s.payer, 2_000)["voucher"].clone();
    let (_, v) = w.t.call("POST", "/settle", &s.key, Some(x402_v2(&req, twin))).await;
    assert_eq!((v["success"].as_bool(), v["errorReason"].as_str()), (Some(false), Some("duplicate_settlement")), "{v}");
    let (other_key, _) = w.t.customer().await;
    let (_, v) = w.t.call("POST", "/settle", &other_key, Some(body)).await;
    assert_eq!((v["success"].as_bool(), v["errorReason"].as_str()), (Some(false), Some("duplicate_settlement")), "{v}");
    assert_eq!(w.channel(id).await, (5_000, 0), "paid once");

    // The deposit is the seller's received payment into the escrow, read back from the chain.
    let payment_id = v_payment(&answers);
    let (status, p) = w.t.call("GET", &format!("/payment/status/{payment_id}"), &s.key, None).await;
    assert_eq!(status, StatusCode::OK, "{p}");
    assert_eq!((p["status"].as_str(), p["amountAtomic"].as_str()), (Some("confirmed"), Some("5000")), "{p}");
    assert_eq!(
        p["to"].as_str().map(str::to_lowercase),
        Some(format!("{:#x}", tollgate_encoding::batch::BATCH_SETTLEMENT)),
        "{p}"
    );

    // A top-up of the same channel: a new authorization, added to it.
    let top_up = w.deposit_payload(&s.config, &s.payer, &s.payer, (3_000, 2_000), 4);
    let (_, v) = w.t.call("POST", "/settle", &s.key, Some(x402_v2(&req, top_up))).await;
    assert_eq!(
        (v["success"].as_bool(), v["extra"]["channelState"]["balance"].as_str()),
        (Some(true), Some("8000")),
        "{v}"
    );
    assert_eq!(w.channel(id).await, (8_000, 0));

    // What the facilitator does not settle for buyers: a voucher (the seller claims later).
    let (_, v) =
        w.t.call("POST", "/settle", &s.key, Some(x402_v2(&req, w.voucher_payload(&s.config, &s.payer, 3_000)))).await;
    assert_eq!(v["errorReason"].as_str(), Some("invalid_batch_settlement_evm_payload_type"), "{v}");
}

fn v_payment(answers: &[(StatusCode, Value)]) -> String {
    answers.iter().find_map(|(_, v)| v["paymentId"].as_str()).unwrap().to_owned()
}

/// Runs `tests/js/<script>` on Node (the official x402 packages `scripts/test` installs) with
/// `args` and `key` as `BUYER_KEY`: the one JSON line it prints.
async fn official(script: &str, args: &[&str], key: &PrivateKeySigner) -> Value {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let modules = root.join(".tools/x402/node_modules");
    assert!(modules.join("@x402/evm").exists(), "the official x402 client is not installed: run scripts/test");
    let output = tokio::process::Command::new("node")
        .arg(root.join("tests/js").join(script))
        .args(args)
        .env("NODE_PATH", modules)
        .env("BUYER_KEY", alloy::hex::encode_prefixed(key.to_bytes()))
        .kill_on_drop(true)
        .output()
        .await
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{script} failed: {stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_str(stdout.trim()).unwrap()
}

/// What the official client signs — the channel id, the ERC-3009 deposit with its nonce derived
/// from the channel, the vouchers, its JSON — is what Tollgate's facilitator checks and settles.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_batch_client_deposits_and_pays_vouchers_tollgate_accepts() {
    let s = shop().await;
    let w = &s.w;
    let req = s.requirement();
    let made = official("batch-payloads.cjs", &[&req.to_string()], &s.payer).await;
    let (deposit, voucher) = (&made["deposit"]["payload"], &made["voucher"]["payload"]);
    assert_eq!((deposit["type"].as_str(), voucher["type"].as_str()), (Some("deposit"), Some("voucher")), "{made}");
    let id = deposit["voucher"]["channelId"].as_str().unwrap().to_owned();
    assert_eq!(
        deposit["channelConfig"]["payerAuthorizer"].as_str().map(str::to_lowercase),
        Some(format!("{:#x}", s.payer.address())),
        "the official client signs its vouchers with its own key"
    );

    let v = s.verify(&req, deposit.clone()).await;
    assert_eq!((v["isValid"].as_bool(), v["extra"]["channelId"].as_str()), (Some(true), Some(&*id)), "{v}");
    let (_, v) = w.t.call("POST", "/settle", &s.key, Some(x402_v2(&req, deposit.clone()))).await;
    assert_eq!(v["success"], true, "{v}");
    let amount: u128 = deposit["deposit"]["amount"].as_str().unwrap().parse().unwrap();
    assert_eq!(v["extra"]["channelState"]["balance"].as_str(), Some(&*amount.to_string()), "{v}");
    assert_eq!(w.balance(s.payer.address()).await, 1_000_000 - amount);

    let v = s.verify(&req, voucher.clone()).await;
    assert_eq!(
        (v["isValid"].as_bool(), voucher["voucher"]["maxClaimableAmount"].as_str()),
        (Some(true), Some("2000")),
        "{v}"
    );
}

/// What arrives at the settlement contract is read as deposits into channels: no other payment
/// may name it as its recipient (a seller would be "paid" by a payer funding its own channel).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_other_scheme_pays_the_settlement_contract() {
    let s = shop().await;
    let w = &s.w;
    let escrow = tollgate_encoding::batch::BATCH_SETTLEMENT;
    let req = w.token.requirement(&w.t, escrow, 1_000);
    let now = chrono::Utc::now().timestamp().unsigned_abs();
    let payload = w.token.authorize(&w.t, &s.payer, escrow, 1_000, (0, now + 600), B256::repeat_byte(5));
    for path in ["/verify", "/settle"] {
        let (_, v) = w.t.call("POST", path, &s.key, Some(x402_v2(&req, payload.clone()))).await;
        let reason = v["invalidReason"].as_str().or(v["errorReason"].as_str());
        assert_eq!(reason, Some("invalid_payment_requirements"), "{path}: {v}");
    }
    assert_eq!(w.balance(escrow).await, 0);
}

/// Asserts a settlement refused with the scheme's reason `why`.
fn refused(v: &Value, why: &str) {
    assert_eq!(
        (v["success"].as_bool(), v["errorReason"].as_str()),
        (Some(false), Some(&*format!("invalid_batch_settlement_evm_{why}"))),
        "{why}: {v}"
    );
}

/// A seller's claim row for `config`'s voucher of `ceiling`, claiming `total`.
fn claim_row(w: &World, config: &ChannelConfig, key: &PrivateKeySigner, (ceiling, total): (u128, u128)) -> Value {
    let id = config.id(w.chain());
    json!({
        "voucher": {"channel": common::batch::config_json(config), "maxClaimableAmount": ceiling.to_string()},
        "signature": common::batch::voucher(w, key, id, ceiling).to_string(),
        "totalClaimed": total.to_string(),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_facilitator_claims_only_for_the_seller_that_funded_the_channel_and_sweeps_once() {
    let s = shop().await;
    let w = &s.w;
    let req = s.requirement();
    let id = s.config.id(w.chain());
    s.fund(&req, &s.config, (5_000, 1_000), 1).await;
    let claim = |rows: Vec<Value>| json!({"type": "claim", "claims": rows});
    let stranger = PrivateKeySigner::random();
    let (other_key, _) = w.t.customer().await;

    // Claims that must not be signed or sent: another account's receiver, a voucher not the
    // payer's, a total above it, a wrong authorizer signature, an authorizer that is not this
    // facilitator without the seller's own signature.
    let good = claim_row(w, &s.config, &s.payer, (3_000, 3_000));
    let (_, v) = w.t.call("POST", "/settle", &other_key, Some(x402_v2(&req, claim(vec![good.clone()])))).await;
    refused(&v, "authorizer_address_mismatch");
    let (_, v) =
        w.t.call(
            "POST",
            "/settle",
            &s.key,
            Some(x402_v2(&req, claim(vec![claim_row(w, &s.config, &stranger, (3_000, 3_000))]))),
        )
        .await;
    refused(&v, "voucher_signature");
    let mut above = good.clone();
    above["totalClaimed"] = json!("3001");
    let (_, v) = w.t.call("POST", "/settle", &s.key, Some(x402_v2(&req, claim(vec![above])))).await;
    refused(&v, "claim_payload");
    let mut forged = claim(vec![good.clone()]);
    forged["claimAuthorizerSignature"] = json!(common::batch::voucher(w, &stranger, id, 1).to_string());
    let (_, v) = w.t.call("POST", "/settle", &s.key, Some(x402_v2(&req, forged))).await;
    refused(&v, "authorizer_address_mismatch");
    assert_eq!(w.channel(id).await, (5_000, 0), "nothing claimed");
    // Nothing claimed: nothing to sweep.
    let unclaimed = json!({"type": "settle", "receiver": s.receiver.to_string(), "token": w.token.address.to_string()});
    let (_, v) = w.t.call("POST", "/settle", &s.key, Some(x402_v2(&req, unclaimed))).await;
    refused(&v, "nothing_to_settle");

    // The seller's claim, signed by the facilitator as the delegated authorizer; again, a no-op.
    for _ in 0..2 {
        let (_, v) = w.t.call("POST", "/settle", &s.key, Some(x402_v2(&req, claim(vec![good.clone()])))).await;
        assert_eq!(v["success"], true, "{v}");
        assert_eq!(v["extra"]["channelStates"][0]["totalClaimed"].as_str(), Some("3000"), "{v}");
        assert_eq!(w.channel(id).await, (5_000, 3_000));
    }

    // The sweep: another receiver refused; eight at once pay the receiver once; then nothing.
    let sweep = |receiver: Address| json!({"type": "settle", "receiver": receiver.to_string(), "token": w.token.address.to_string()});
    let (_, v) = w.t.call("POST", "/settle", &s.key, Some(x402_v2(&req, sweep(stranger.address())))).await;
    refused(&v, "settle_payload");
    let body = x402_v2(&req, sweep(s.receiver));
    let calls = (0..8).map(|_| w.t.call("POST", "/settle", &s.key, Some(body.clone())));
    let answers = futures_util::future::join_all(calls).await;
    let transactions: std::collections::BTreeSet<_> =
        answers.iter().filter(|(_, v)| v["success"] == true).map(|(_, v)| v["transaction"].to_string()).collect();
    assert_eq!(transactions.len(), 1, "{answers:?}");
    assert_eq!(w.balance(s.receiver).await, 3_000);
    assert!(answers.iter().all(|(_, v)| v["success"] == true), "each is answered with the one sweep: {answers:?}");
    // Asked again: the same sweep (its claims are the same), nothing more moves.
    let (_, v) = w.t.call("POST", "/settle", &s.key, Some(body.clone())).await;
    assert_eq!(
        (v["success"].as_bool(), v["transaction"].to_string()),
        (Some(true), transactions.first().unwrap().clone()),
        "{v}"
    );
    assert_eq!(w.balance(s.receiver).await, 3_000, "swept once");

    // A seller holding its own receiver authorizer: its signed claim is relayed.
    let own = PrivateKeySigner::random();
    let config = w.config(s.payer.address(), Address::ZERO, s.receiver, own.address(), 2);
    let req = w.requirement(s.receiver, own.address(), 1_000);
    s.fund(&req, &config, (2_000, 1_000), 2).await;
    let (_, v) =
        w.t.call(
            "POST",
            "/settle",
            &s.key,
            Some(x402_v2(&req, claim(vec![claim_row(w, &config, &s.payer, (1_500, 1_500))]))),
        )
        .await;
    refused(&v, "authorizer_address_mismatch");
    let rows = vec![common::batch::row(
        &config,
        1_500,
        common::batch::voucher(w, &s.payer, config.id(w.chain()), 1_500),
        1_500,
    )];
    let signed = common::batch::signed_claim(w, rows, &own);
    let mut relayed = claim(vec![claim_row(w, &config, &s.payer, (1_500, 1_500))]);
    relayed["claimAuthorizerSignature"] = json!(signed.authorizerSignature.to_string());
    let (_, v) = w.t.call("POST", "/settle", &other_key, Some(x402_v2(&req, relayed))).await;
    assert_eq!(v["success"], true, "anyone may relay a claim its authorizer signed: {v}");
    assert_eq!(w.channel(config.id(w.chain())).await, (2_000, 1_500));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn supported_names_the_facilitator_as_the_receiver_authorizer_sellers_may_delegate_to() {
    let s = shop().await;
    let (_, v) = s.w.t.call("GET", "/supported", &s.key, None).await;
    let kind = v["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["scheme"] == "batch-settlement" && k["x402Version"] == 2)
        .unwrap_or_else(|| panic!("no batch-settlement kind: {v}"));
    assert_eq!(kind["network"].as_str(), Some(&*s.w.t.network().to_string()));
    assert_eq!(
        kind["extra"]["receiverAuthorizer"].as_str().map(str::to_lowercase),
        Some(format!("{:#x}", s.authorizer))
    );
    let v1 =
        v["kinds"].as_array().unwrap().iter().filter(|k| k["scheme"] == "batch-settlement" && k["x402Version"] == 1);
    assert_eq!(v1.count(), 0, "an x402 v2 scheme only");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_returns_only_what_was_not_charged_once_per_nonce_for_the_channels_seller() {
    let s = shop().await;
    let w = &s.w;
    let req = s.requirement();
    let id = s.config.id(w.chain());
    s.fund(&req, &s.config, (5_000, 1_000), 1).await;
    // The buyer asks for its money back after being charged 3,000: a zero-charge voucher.
    let asked = json!({"type": "refund", "channelConfig": common::batch::config_json(&s.config),
        "voucher": w.voucher_payload(&s.config, &s.payer, 3_000)["voucher"]});
    // The seller completes it: the next refund nonce, and the claim of what it charged.
    let completed = |nonce: u64| {
        let mut p = asked.clone();
        p["refundNonce"] = json!(nonce.to_string());
        p["claims"] = json!([claim_row(w, &s.config, &s.payer, (3_000, 3_000))]);
        p
    };
    let (other_key, _) = w.t.customer().await;
    let (_, v) = w.t.call("POST", "/settle", &s.key, Some(x402_v2(&req, asked.clone()))).await;
    refused(&v, "refund_payload");
    let (_, v) = w.t.call("POST", "/settle", &s.key, Some(x402_v2(&req, completed(1)))).await;
    refused(&v, "refund_payload");
    let (_, v) = w.t.call("POST", "/settle", &other_key, Some(x402_v2(&req, completed(0)))).await;
    refused(&v, "refund_payload");
    let mut unclaimed = completed(0);
    unclaimed["claims"] = json!([]);
    let (_, v) = w.t.call("POST", "/settle", &other_key, Some(x402_v2(&req, unclaimed))).await;
    refused(&v, "refund_payload");
    let mut elsewhere = completed(0);
    let other = w.config(s.payer.address(), Address::ZERO, s.receiver, s.authorizer, 9);
    elsewhere["claims"] = json!([claim_row(w, &other, &s.payer, (3_000, 3_000))]);
    let (_, v) = w.t.call("POST", "/settle", &s.key, Some(x402_v2(&req, elsewhere))).await;
    assert_eq!(v["success"], false, "another channel's claims: {v}");
    assert_eq!((w.channel(id).await, w.balance(s.payer.address()).await), ((5_000, 0), 995_000));

    // The refund: the 3,000 charged are claimed, the 2,000 left go back, in one transaction.
    let (_, v) = w.t.call("POST", "/settle", &s.key, Some(x402_v2(&req, completed(0)))).await;
    assert_eq!((v["success"].as_bool(), v["amount"].as_str()), (Some(true), Some("2000")), "{v}");
    assert_eq!(v["extra"]["channelState"]["refundNonce"].as_str(), Some("1"), "{v}");
    assert_eq!(w.channel(id).await, (3_000, 3_000));
    assert_eq!(w.balance(s.payer.address()).await, 997_000);
    // Settled again by its seller: the same refund; nothing more moves.
    let (_, again) = w.t.call("POST", "/settle", &s.key, Some(x402_v2(&req, completed(0)))).await;
    assert_eq!((again["success"].as_bool(), &again["transaction"]), (Some(true), &v["transaction"]), "{again}");
    assert_eq!(w.balance(s.payer.address()).await, 997_000);
    // Nothing unclaimed is left to return.
    let (_, v) = w.t.call("POST", "/settle", &s.key, Some(x402_v2(&req, completed(1)))).await;
    refused(&v, "refund_no_balance");
    // The receiver's 3,000 are still its own to sweep.
    let sweep = json!({"type": "settle", "receiver": s.receiver.to_string(), "token": w.token.address.to_string()});
    let (_, v) = w.t.call("POST", "/settle", &s.key, Some(x402_v2(&req, sweep))).await;
    assert_eq!((v["success"].as_bool(), v["amount"].as_str()), (Some(true), Some("3000")), "{v}");
    assert_eq!(w.balance(s.receiver).await, 3_000);

    // A top-up, then a partial refund of 500 of it.
    s.fund(&req, &s.config, (1_000, 3_500), 2).await;
    let mut partial = completed(1);
    partial["amount"] = json!("500");
    partial["claims"] = json!([]);
    let (_, v) = w.t.call("POST", "/settle", &s.key, Some(x402_v2(&req, partial))).await;
    assert_eq!((v["success"].as_bool(), v["amount"].as_str()), (Some(true), Some("500")), "{v}");
    assert_eq!(w.channel(id).await, (3_500, 3_000));
}

/// The payer, with an account of its own at the same facilitator, settles its own deposit first
/// and then asks for everything unclaimed back, after being served on vouchers: the facilitator
/// signs refunds and claims only for the receiver's own account, so the seller still claims what
/// it charged and nothing goes back that was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payer_settling_its_own_deposit_cannot_take_back_what_it_was_charged() {
    let s = shop().await;
    let w = &s.w;
    let req = s.requirement();
    let id = s.config.id(w.chain());
    let (payer_account, _) = w.t.customer().await;
    let deposit = w.deposit_payload(&s.config, &s.payer, &s.payer, (5_000, 1_000), 1);
    let (_, v) = w.t.call("POST", "/settle", &payer_account, Some(x402_v2(&req, deposit))).await;
    assert_eq!(v["success"], true, "anyone may send a payer's deposit: {v}");
    // Served up to 3,000 on vouchers; then the payer asks for a full refund, claiming nothing.
    let refund = json!({"type": "refund", "channelConfig": common::batch::config_json(&s.config),
        "voucher": w.voucher_payload(&s.config, &s.payer, 3_000)["voucher"], "refundNonce": "0"});
    let (_, v) = w.t.call("POST", "/settle", &payer_account, Some(x402_v2(&req, refund))).await;
    refused(&v, "refund_payload");
    let claim = json!({"type": "claim", "claims": [claim_row(w, &s.config, &s.payer, (1_000, 1_000))]});
    let (_, v) = w.t.call("POST", "/settle", &payer_account, Some(x402_v2(&req, claim))).await;
    refused(&v, "authorizer_address_mismatch");
    assert_eq!(w.channel(id).await, (5_000, 0));
    // The seller claims what it charged.
    let claim = json!({"type": "claim", "claims": [claim_row(w, &s.config, &s.payer, (3_000, 3_000))]});
    let (_, v) = w.t.call("POST", "/settle", &s.key, Some(x402_v2(&req, claim))).await;
    assert_eq!(v["success"], true, "{v}");
    assert_eq!(w.channel(id).await, (5_000, 3_000));
}

/// A storage fault injected (by a SQLite trigger) at each write of a deposit's settlement: the
/// seller's `/settle` fails; afterwards — the reconciler's pass, then the seller's retry of the
/// same deposit — the channel holds it once and one payment records it. Never a record of money
/// that did not move, nor a second transfer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storage_fault_at_any_step_of_a_deposit_leaves_it_deposited_once() {
    let s = shop().await;
    let w = &s.w;
    let req = s.requirement();
    let id = s.config.id(w.chain());
    let mut held = 0;
    for (salt, (step, when)) in (10..).zip(common::FAULT_STEPS) {
        let body = x402_v2(&req, w.deposit_payload(&s.config, &s.payer, &s.payer, (1_000, 1_000), salt));
        common::sqlite(
            &w.t.db_path(),
            &format!("CREATE TRIGGER fault {when} BEGIN SELECT RAISE(ABORT, 'injected fault'); END"),
        )
        .await;
        let (status, v) = w.t.call("POST", "/settle", &s.key, Some(body.clone())).await;
        assert!(status == StatusCode::INTERNAL_SERVER_ERROR || v["success"] == false, "{step}: {status} {v}");
        common::sqlite(&w.t.db_path(), "DROP TRIGGER fault").await;

        common::reconcile_in(&*w.t.store, &w.t.state.chains, chrono::Duration::hours(1)).await;
        let (status, v) = w.t.call("POST", "/settle", &s.key, Some(body)).await;
        assert_eq!(
            (status, v["success"].as_bool(), v["amount"].as_str()),
            (StatusCode::OK, Some(true), Some("1000")),
            "{step}: {v}"
        );
        held += 1_000;
        assert_eq!(w.channel(id).await, (held, 0), "{step}: deposited exactly once");
        assert_eq!(w.balance(s.payer.address()).await, 1_000_000 - held, "{step}");
        let escrow = tollgate_encoding::batch::BATCH_SETTLEMENT;
        let (_, history) = w.t.call("GET", &format!("/payment/history/{escrow}?type=received"), &s.key, None).await;
        assert_eq!(history["total"].as_u64(), Some(held as u64 / 1_000), "{step}: one record per deposit: {history}");
    }
}

/// The seller hangs up while its deposit is being settled, at several moments: the settlement
/// goes on without it, and the same deposit settled again is answered with that one; it moved
/// once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seller_hanging_up_mid_settlement_leaves_its_deposit_made_once() {
    let s = shop().await;
    let w = &s.w;
    let req = s.requirement();
    let id = s.config.id(w.chain());
    let body = x402_v2(&req, w.deposit_payload(&s.config, &s.payer, &s.payer, (5_000, 1_000), 1));
    for millis in [1, 2, 4, 8, 16, 32, 64] {
        let call = w.t.call("POST", "/settle", &s.key, Some(body.clone()));
        let _ = tokio::time::timeout(std::time::Duration::from_millis(millis), call).await;
    }
    let (_, v) = w.t.call("POST", "/settle", &s.key, Some(body.clone())).await;
    assert_eq!((v["success"].as_bool(), v["amount"].as_str()), (Some(true), Some("5000")), "{v}");
    let (_, again) = w.t.call("POST", "/settle", &s.key, Some(body)).await;
    assert_eq!(again["transaction"], v["transaction"], "{again}");
    assert_eq!(w.channel(id).await, (5_000, 0), "deposited once");
    assert_eq!(w.balance(s.payer.address()).await, 995_000);
}

/// The same deposit settled twice at once, the first request's simulation reaching the node
/// only after the second's deposit landed (the proxy holds it): the chain then refuses the used
/// authorization, and the first request is answered with the second's payment, not with
/// "simulation failed". The race a hung-up request leaves behind, whose settlement goes on
/// without it, made deterministic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposit_checked_while_its_twin_lands_is_answered_with_the_twins_payment() {
    use common::rpc_proxy::Rule;
    use std::sync::Arc;
    use tokio::sync::Notify;

    let s = shop_on(World::start_behind_proxy().await).await;
    let w = &s.w;
    let req = s.requirement();
    let id = s.config.id(w.chain());
    let body = x402_v2(&req, w.deposit_payload(&s.config, &s.payer, &s.payer, (5_000, 1_000), 1));
    let (reached, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let hold = Rule::HoldOnce { reached: reached.clone(), release: release.clone() };
    w.t.proxy.as_ref().unwrap().rule("eth_estimateGas", hold);

    let late = w.t.call("POST", "/settle", &s.key, Some(body.clone()));
    let twin = async {
        reached.notified().await;
        let answer = w.t.call("POST", "/settle", &s.key, Some(body.clone())).await;
        release.notify_one();
        answer
    };
    let ((_, late), (_, twin)) = tokio::join!(late, twin);
    assert_eq!((twin["success"].as_bool(), twin["amount"].as_str()), (Some(true), Some("5000")), "{twin}");
    assert_eq!((late["success"].as_bool(), &late["transaction"]), (Some(true), &twin["transaction"]), "{late}");
    assert_eq!(w.channel(id).await, (5_000, 0), "deposited once");
    assert_eq!(w.balance(s.payer.address()).await, 995_000);
}

/// What a facilitator asks the chain (counted by a proxy in front of anvil): a voucher's verify
/// is one call, whatever the seller's traffic; a deposit's settlement is printed for the book.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voucher_verify_asks_the_chain_once() {
    let s = shop_on(World::start_behind_proxy().await).await;
    let w = &s.w;
    let req = s.requirement();
    let proxy = w.t.proxy.as_ref().unwrap();
    let before = proxy.all_calls();
    let deposit = w.deposit_payload(&s.config, &s.payer, &s.payer, (5_000, 1_000), 1);
    let (_, v) = w.t.call("POST", "/settle", &s.key, Some(x402_v2(&req, deposit))).await;
    assert_eq!(v["success"], true, "{v}");
    eprintln!("RPC calls of a deposit's settlement: {:?}", common::rpc_proxy::calls_since(&before, &proxy.all_calls()));
    for max in [1_000, 2_000, 3_000] {
        let before = proxy.all_calls();
        let v = s.verify(&req, w.voucher_payload(&s.config, &s.payer, max)).await;
        assert_eq!(v["isValid"], true, "{v}");
        assert_eq!(
            common::rpc_proxy::calls_since(&before, &proxy.all_calls()),
            [("eth_call".to_owned(), 1)].into(),
            "one verify, one call"
        );
    }
}
