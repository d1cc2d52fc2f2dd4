//! x402's `batch-settlement` contracts (`contracts/X402BatchSettlement.sol`) on a real anvil, at
//! their canonical addresses, driven with Tollgate's encodings (`tollgate_encoding::batch`): the
//! ids and digests agree with the contract's own, deposits fund only the channel they were
//! signed for, claims count once and never past a voucher or the escrow, a sweep pays what was
//! claimed, refunds and withdrawals return only what was not claimed. The attacks come with
//! each step: replays, other signers, a stranger calling a collector, a claim above its voucher.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

use crate::common;

use alloy::primitives::{Address, B256, Bytes, U256};
use alloy::signers::SignerSync as _;
use alloy::signers::local::PrivateKeySigner;
use alloy::sol_types::{SolCall as _, SolStruct as _};
use common::batch::{Collector, World, row, signed_claim, signed_refund, voucher};
use common::permit2::P2Token;
use tollgate_encoding::batch::{
    self as wire, BATCH_SETTLEMENT, BatchSettlement as Contract, ChannelConfig, ERC3009_COLLECTOR, PERMIT2_COLLECTOR,
};
use tollgate_facilitator::devnet::TokenKind;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_is_funded_once_claimed_once_swept_and_refunded_what_was_not_claimed() {
    let w = World::start().await;
    let chain = w.chain();
    let (payer, payer_key, receiver_key, stranger) = (
        PrivateKeySigner::random(),
        PrivateKeySigner::random(),
        PrivateKeySigner::random(),
        PrivateKeySigner::random(),
    );
    let receiver = Address::repeat_byte(0x51);
    w.token.mint(&w.t, payer.address(), 5_000_000).await;
    let config = w.config(payer.address(), payer_key.address(), receiver, receiver_key.address(), 1);
    let id = config.id(chain);

    // Tollgate's ids and digests are the contract's.
    assert_eq!(w.read(&Contract::getChannelIdCall { config: config.clone() }).await, id);
    assert_eq!(
        w.read(&Contract::getVoucherDigestCall { channelId: id, maxClaimableAmount: 777 }).await,
        wire::voucher_digest(chain, id, 777)
    );
    assert_eq!(
        w.read(&Contract::getRefundDigestCall { channelId: id, nonce: U256::from(3), amount: 9 }).await,
        wire::refund_digest(chain, id, U256::from(3), 9)
    );
    let rows = vec![row(&config, 500, Bytes::new(), 400), row(&config, 600, Bytes::new(), 600)];
    assert_eq!(
        w.read(&Contract::getClaimBatchDigestCall { voucherClaims: rows }).await,
        wire::claim_batch_digest(chain, &[(id, 500, 400), (id, 600, 600)])
    );

    // A stranger calling the collector with the payer's signature, to be paid itself: refused.
    let deposit = w.deposit_3009(&config, &payer, 1_000_000, id, 7);
    let steal = Collector::collectCall {
        payer: payer.address(),
        token: w.token.address,
        amount: U256::from(1_000_000u64),
        channelId: id,
        collectorData: deposit.collectorData.clone(),
    };
    assert!(
        !w.send_to(&stranger, ERC3009_COLLECTOR, steal.abi_encode()).await,
        "only the settlement contract collects"
    );
    // The signature, sent for another channel of the same payer: its nonce names this one.
    let other = w.config(payer.address(), payer_key.address(), receiver, receiver_key.address(), 2);
    let misdirected = Contract::depositCall { config: other.clone(), ..deposit.clone() };
    assert!(!w.send(&w.relayer, &misdirected).await, "a deposit funds only the channel it was signed for");
    // A deposit the signature does not cover (more than signed): refused.
    let inflated = Contract::depositCall { amount: 2_000_000, ..deposit.clone() };
    assert!(!w.send(&w.relayer, &inflated).await);
    assert_eq!(w.balance(payer.address()).await, 5_000_000, "nothing moved");

    // The deposit, sent by anyone: escrowed; the same signature again moves nothing more.
    assert!(w.send(&w.relayer, &deposit).await);
    assert_eq!(w.channel(id).await, (1_000_000, 0));
    assert_eq!(w.balance(BATCH_SETTLEMENT).await, 1_000_000);
    assert!(!w.send(&w.relayer, &deposit).await, "an authorization funds once");
    assert_eq!(w.balance(payer.address()).await, 4_000_000);

    // A second channel whose payer signs its vouchers itself (no payer authorizer).
    let payer2 = PrivateKeySigner::random();
    w.token.mint(&w.t, payer2.address(), 1_000_000).await;
    let config2 = w.config(payer2.address(), Address::ZERO, receiver, receiver_key.address(), 3);
    let id2 = config2.id(chain);
    assert!(w.send(&w.relayer, &w.deposit_3009(&config2, &payer2, 500_000, id2, 1)).await);

    // Claims the receiver authorizer did not sign, or beyond what the payer signed: refused.
    let v300 = voucher(&w, &payer_key, id, 300);
    let v200_2 = voucher(&w, &payer2, id2, 200);
    let forger = PrivateKeySigner::random();
    for (call, why) in [
        (signed_claim(&w, vec![row(&config, 300, v300.clone(), 300)], &forger), "another authorizer"),
        (
            signed_claim(&w, vec![row(&config, 300, voucher(&w, &payer, id, 300), 300)], &receiver_key),
            "the payer, not its authorizer",
        ),
        (signed_claim(&w, vec![row(&config, 300, v300.clone(), 301)], &receiver_key), "above the voucher"),
        (
            signed_claim(&w, vec![row(&config, 301, v300.clone(), 301)], &receiver_key),
            "a ceiling the payer did not sign",
        ),
        (signed_claim(&w, vec![row(&config2, 300, v300.clone(), 300)], &receiver_key), "another channel's voucher"),
        (
            signed_claim(
                &w,
                vec![row(&config, 2_000_000, voucher(&w, &payer_key, id, 2_000_000), 1_000_001)],
                &receiver_key,
            ),
            "beyond the escrow",
        ),
    ] {
        assert!(!w.send(&w.relayer, &call).await, "{why}");
    }
    let mut tampered = signed_claim(&w, vec![row(&config, 300, v300.clone(), 300)], &receiver_key);
    tampered.voucherClaims[0].totalClaimed = 250;
    assert!(!w.send(&w.relayer, &tampered).await, "the batch is signed row by row");
    let direct = Contract::claimCall { voucherClaims: vec![row(&config, 300, v300.clone(), 300)] };
    assert!(!w.send(&stranger, &direct).await, "an unsigned claim comes from the receiver side only");
    assert_eq!((w.channel(id).await, w.channel(id2).await), ((1_000_000, 0), (500_000, 0)));

    // One batch claims both channels, sent by anyone; sent again, it counts once.
    let batch =
        signed_claim(&w, vec![row(&config, 300, v300.clone(), 300), row(&config2, 200, v200_2, 150)], &receiver_key);
    assert!(w.send(&w.relayer, &batch).await);
    assert!(w.send(&stranger, &batch).await, "a replayed batch is a no-op, not an error");
    assert_eq!((w.channel(id).await, w.channel(id2).await), ((1_000_000, 300), (500_000, 150)));
    let account = w.read(&Contract::receiversCall { receiver, token: w.token.address }).await;
    assert_eq!((account.totalClaimed, account.totalSettled), (450, 0));
    // A lower claim under a later voucher changes nothing; the receiver itself may claim directly.
    let v900 = voucher(&w, &payer_key, id, 900);
    assert!(w.send(&w.relayer, &signed_claim(&w, vec![row(&config, 900, v900.clone(), 200)], &receiver_key)).await);
    assert_eq!(w.channel(id).await, (1_000_000, 300));
    assert!(w.send(&receiver_key, &Contract::claimCall { voucherClaims: vec![row(&config, 900, v900, 900)] }).await);
    assert_eq!(w.channel(id).await, (1_000_000, 900));

    // The sweep pays the receiver what was claimed, once.
    let sweep = Contract::settleCall { receiver, token: w.token.address };
    assert!(w.send(&stranger, &sweep).await);
    assert_eq!(w.balance(receiver).await, 1_050);
    assert!(w.send(&stranger, &sweep).await);
    assert_eq!(w.balance(receiver).await, 1_050, "nothing claimed since, nothing swept");

    // Refunds: signed for the channel's nonce, once; never more than what is unclaimed.
    let refund = signed_refund(&w, &config, 100_000, 0, &receiver_key);
    assert!(!w.send(&w.relayer, &signed_refund(&w, &config, 100_000, 0, &forger)).await, "another authorizer");
    assert!(!w.send(&w.relayer, &signed_refund(&w, &config, 100_000, 1, &receiver_key)).await, "a future nonce");
    assert!(!w.send(&w.relayer, &Contract::refundWithSignatureCall { amount: 200_000, ..refund.clone() }).await);
    assert!(w.send(&stranger, &refund).await);
    assert_eq!(w.balance(payer.address()).await, 4_100_000);
    assert_eq!(w.read(&Contract::refundNonceCall { channelId: id }).await, U256::from(1));
    assert!(!w.send(&stranger, &refund).await, "a refund signature is good once");
    assert!(
        !w.send(&stranger, &Contract::refundCall { config: config.clone(), amount: 1 }).await,
        "receiver side only"
    );
    // A refund of everything returns what is not claimed: the claimed 900 stay for the receiver.
    assert!(w.send(&w.relayer, &signed_refund(&w, &config, u128::MAX, 1, &receiver_key)).await);
    assert_eq!(w.channel(id).await, (900, 900));
    assert_eq!(w.balance(payer.address()).await, 5_000_000 - 900);
    assert!(w.send(&stranger, &sweep).await);
    assert_eq!(w.balance(receiver).await, 1_050, "claimed funds were swept already");
    // The contract holds the escrow of both channels less what it paid out: the second
    // channel's 500,000 less its 150 swept (the first's 900 are all swept).
    assert_eq!(w.balance(BATCH_SETTLEMENT).await, 500_000 - 150);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_withdrawal_waits_its_delay_and_leaves_what_the_receiver_claimed_meanwhile() {
    let w = World::start().await;
    let (payer, receiver_key, stranger) =
        (PrivateKeySigner::random(), PrivateKeySigner::random(), PrivateKeySigner::random());
    let receiver = Address::repeat_byte(0x52);
    w.token.mint(&w.t, payer.address(), 1_000).await;
    let config = w.config(payer.address(), Address::ZERO, receiver, receiver_key.address(), 1);
    let id = config.id(w.chain());
    assert!(w.send(&w.relayer, &w.deposit_3009(&config, &payer, 1_000, id, 1)).await);
    let voucher_400 = voucher(&w, &payer, id, 400);

    let start = Contract::initiateWithdrawCall { config: config.clone(), amount: 1_000 };
    assert!(!w.send(&stranger, &start).await, "the payer side only");
    assert!(
        !w.send(&payer, &Contract::initiateWithdrawCall { amount: 1_001, ..start.clone() }).await,
        "more than escrowed"
    );
    assert!(w.send(&payer, &start).await);
    let initiated = w.now().await;
    assert!(!w.send(&payer, &start).await, "one withdrawal at a time");
    let finalize = Contract::finalizeWithdrawCall { config: config.clone() };
    assert!(!w.send(&payer, &finalize).await, "not before its delay");

    // The receiver claims during the delay what the payer promised.
    assert!(w.send(&w.relayer, &signed_claim(&w, vec![row(&config, 400, voucher_400, 400)], &receiver_key)).await);
    // The chain's clock set, not the wall clock's: a second boundary crossed on the way would
    // otherwise put the first attempt at the delay's end.
    w.next_block_at(initiated + 899).await;
    assert!(!w.send(&payer, &finalize).await, "still within the delay");
    w.next_block_at(initiated + 900).await;
    assert!(w.send(&payer, &finalize).await);
    assert_eq!(w.balance(payer.address()).await, 600, "what was not claimed");
    assert_eq!(w.channel(id).await, (400, 400));
    assert!(!w.send(&payer, &finalize).await, "finalized once");
    assert!(w.send(&stranger, &Contract::settleCall { receiver, token: w.token.address }).await);
    assert_eq!(w.balance(receiver).await, 400);
    assert_eq!(w.balance(BATCH_SETTLEMENT).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit2_deposit_funds_only_the_channel_its_witness_names() {
    let w = World::start().await;
    let token = P2Token::deploy(&w.t, TokenKind::Plain, "Plain USD").await;
    let (payer, receiver_key) = (PrivateKeySigner::random(), PrivateKeySigner::random());
    token.mint(&w.t, payer.address(), 10_000).await;
    token.approve_permit2(&w.t, &payer, U256::MAX).await;
    let config = ChannelConfig {
        token: token.address(),
        ..w.config(payer.address(), Address::ZERO, Address::repeat_byte(0x53), receiver_key.address(), 1)
    };
    let other = ChannelConfig { salt: B256::repeat_byte(9), ..config.clone() };
    let id = config.id(w.chain());
    let deadline = U256::from(chrono::Utc::now().timestamp().unsigned_abs() + 600);
    let message = wire::PermitWitnessTransferFrom {
        permitted: wire::TokenPermissions { token: token.address(), amount: U256::from(4_000) },
        spender: PERMIT2_COLLECTOR,
        nonce: U256::from(42),
        deadline,
        witness: wire::DepositWitness { channelId: id },
    };
    let signature =
        payer.sign_hash_sync(&message.eip712_signing_hash(&tollgate_encoding::permit2::domain(w.chain()))).unwrap();
    let data = wire::permit2_collector_data(U256::from(42), deadline, &signature.as_bytes(), &[]);
    let deposit = Contract::depositCall {
        config: config.clone(),
        amount: 4_000,
        collector: PERMIT2_COLLECTOR,
        collectorData: data.into(),
    };

    assert!(!w.send(&w.relayer, &Contract::depositCall { config: other, ..deposit.clone() }).await, "another channel");
    assert!(!w.send(&w.relayer, &Contract::depositCall { amount: 3_999, ..deposit.clone() }).await, "another amount");
    assert!(w.send(&w.relayer, &deposit).await);
    assert_eq!(w.channel(id).await, (4_000, 0));
    assert_eq!(token.balance(&w.t, BATCH_SETTLEMENT).await, 4_000);
    assert!(!w.send(&w.relayer, &deposit).await, "a permit's nonce is spent once");
    assert_eq!(token.balance(&w.t, payer.address()).await, 6_000);
}
