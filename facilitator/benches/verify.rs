//! Benchmark: checking proofs without the chain — base64 decode, transaction decode, ed25519
//! signature check, and the payment rules — for an `exact-native` signed transfer and an x402
//! `exact` SPL transfer the facilitator would sponsor; and the EIP-712 digest and signer recovery
//! of an x402 `exact` EIP-3009 authorization (libsecp256k1, as /verify does, and pure-Rust k256).
//! One core.
//!
//! Run: `cargo bench -p tollgate-facilitator --bench verify`.

#![allow(missing_docs)] // criterion_group! generates an undocumented function
#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed benchmark

use base64::Engine as _;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use solana_sdk::hash::Hash;
use solana_sdk::instruction::{AccountMeta, Instruction};
use solana_sdk::pubkey::Pubkey;
use solana_sdk::signature::Keypair;
use solana_sdk::signer::Signer as _;
use solana_sdk::transaction::Transaction;
use tollgate_facilitator::chains::solana::build::Transfer;
use tollgate_facilitator::chains::solana::spl;
use tollgate_facilitator::chains::solana::verify::{check_signed_transfer, decode};

fn bench(c: &mut Criterion) {
    let payer = Keypair::new();
    let seller = Pubkey::new_unique();
    let blockhash = Hash::new_unique();
    let message = Transfer { from: payer.pubkey(), to: seller, lamports: 10_000_000, priority_fee: Some(10_000) }
        .message(&blockhash);
    let tx = Transaction::new(&[&payer], message, blockhash);
    let encoded = base64::engine::general_purpose::STANDARD.encode(bincode::serialize(&tx).unwrap());

    let mut group = c.benchmark_group("proof check, no RPC");
    group.throughput(Throughput::Elements(1));
    group.bench_function("exact-native: decode + signature + rules", |b| {
        b.iter(|| {
            let tx = decode(std::hint::black_box(&encoded)).unwrap();
            check_signed_transfer(&tx, &seller, 10_000_000).unwrap()
        });
    });

    // x402 `exact`: a TransferChecked the buyer signed, with the facilitator as fee payer.
    let sponsor = Keypair::new();
    let mint = Pubkey::new_unique();
    let token = tollgate_facilitator::chains::solana::token::TOKEN_PROGRAM;
    let ata = |owner: &Pubkey| spl::associated_token_address(owner, &mint, &token);
    let mut data = vec![12];
    data.extend_from_slice(&1_000_000u64.to_le_bytes());
    data.push(6);
    let transfer = Instruction::new_with_bytes(
        token,
        &data,
        vec![
            AccountMeta::new(ata(&payer.pubkey()), false),
            AccountMeta::new_readonly(mint, false),
            AccountMeta::new(ata(&seller), false),
            AccountMeta::new_readonly(payer.pubkey(), true),
        ],
    );
    let ixs = [
        solana_compute_budget_interface::ComputeBudgetInstruction::set_compute_unit_limit(20_000),
        solana_compute_budget_interface::ComputeBudgetInstruction::set_compute_unit_price(1_000),
        transfer,
    ];
    let message = solana_sdk::message::Message::new_with_blockhash(&ixs, Some(&sponsor.pubkey()), &blockhash);
    let mut sponsored = Transaction::new_unsigned(message);
    sponsored.partial_sign(&[&payer], blockhash);
    let encoded = base64::engine::general_purpose::STANDARD.encode(bincode::serialize(&sponsored).unwrap());
    let policy = spl::SponsorPolicy::default();
    group.bench_function("exact SPL: decode + signature + fee-payer rules", |b| {
        b.iter(|| {
            let tx = decode(std::hint::black_box(&encoded)).unwrap();
            spl::check_sponsored_transfer(&tx, &sponsor.pubkey(), &policy, None).unwrap()
        });
    });

    // x402 `exact` on EVM: the EIP-712 digest of an EIP-3009 authorization and the signer's
    // recovery (what `/verify` does before asking the chain).
    use alloy::signers::SignerSync as _;
    use alloy::sol_types::SolStruct as _;
    use tollgate_facilitator::chains::evm::erc20::TransferWithAuthorization;
    let evm_payer = alloy::signers::local::PrivateKeySigner::random();
    let domain = alloy::sol_types::eip712_domain! {
        name: "USD Coin",
        version: "2",
        chain_id: 8453,
        verifying_contract: alloy::primitives::Address::repeat_byte(0x33),
    };
    let authorization = TransferWithAuthorization {
        from: evm_payer.address(),
        to: alloy::primitives::Address::repeat_byte(0x44),
        value: alloy::primitives::U256::from(1_000_000u64),
        validAfter: alloy::primitives::U256::ZERO,
        validBefore: alloy::primitives::U256::from(2_000_000_000u64),
        nonce: alloy::primitives::B256::repeat_byte(7),
    };
    let signature = evm_payer.sign_hash_sync(&authorization.eip712_signing_hash(&domain)).unwrap();
    // What /verify runs (libsecp256k1), and the pure-Rust recovery it replaced.
    let bytes = signature.as_bytes();
    group.bench_function("EIP-3009: EIP-712 digest + signer recovery (libsecp256k1)", |b| {
        b.iter(|| {
            let digest = std::hint::black_box(&authorization).eip712_signing_hash(&domain);
            let recovered = tollgate_facilitator::chains::evm::verify::recover_signer(&digest, &bytes);
            assert_eq!(recovered, Some(evm_payer.address()));
        });
    });
    group.bench_function("EIP-3009: EIP-712 digest + signer recovery (k256)", |b| {
        b.iter(|| {
            let digest = std::hint::black_box(&authorization).eip712_signing_hash(&domain);
            assert_eq!(signature.recover_address_from_prehash(&digest).unwrap(), evm_payer.address());
        });
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
