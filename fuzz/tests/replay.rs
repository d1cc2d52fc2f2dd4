//! Every seed and every kept finding through its target's properties: what AFL++ starts from
//! holds, and what it once found stays fixed.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

use std::path::Path;

#[test]
fn every_seed_holds_its_targets_properties() {
    let seeds = tollgate_fuzz::seeds::all();
    for target in tollgate_fuzz::TARGETS {
        let count = seeds.iter().filter(|(t, _, _)| *t == target.name).count();
        assert!(count > 0, "target {} has no seed", target.name);
    }
    for (target, name, bytes) in seeds {
        let target = tollgate_fuzz::target(target).expect("a seed's target exists");
        (target.check)(&bytes);
        eprintln!("{}: seed {name} holds", target.name);
    }
}

#[test]
fn every_finding_kept_stays_fixed() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("regressions");
    let mut ran = 0;
    for entry in std::fs::read_dir(&dir).expect("fuzz/regressions exists") {
        let entry = entry.expect("a readable entry");
        if !entry.path().is_dir() {
            continue;
        }
        let name = entry.file_name().into_string().expect("a target's name");
        let target = tollgate_fuzz::target(&name).unwrap_or_else(|| panic!("regressions/{name}: no such target"));
        for input in std::fs::read_dir(entry.path()).expect("a readable folder") {
            let path = input.expect("a readable entry").path();
            (target.check)(&std::fs::read(&path).expect("a readable input"));
            ran += 1;
        }
    }
    eprintln!("{ran} kept findings hold");
}

/// The bytes of one seed.
fn seed(target: &str, name: &str) -> Vec<u8> {
    tollgate_fuzz::seeds::all()
        .into_iter()
        .find(|(t, n, _)| *t == target && n == name)
        .unwrap_or_else(|| panic!("no seed {target}/{name}"))
        .2
}

/// Seeds that must pass the checks their targets assert about (else those assertions would
/// never run, and the fuzzer would start from refusals only).
#[test]
fn the_valid_seeds_pass_the_checks_whose_properties_the_targets_assert() {
    use tollgate_facilitator::chains::evm::verify as evm;
    use tollgate_facilitator::chains::solana::{spl, verify as solana};

    let raw = seed("evm_transaction", "payment");
    let (envelope, raw) = evm::decode_bytes(&raw).unwrap();
    let pay_to = tollgate_fuzz::evm_transaction::PAY_TO;
    evm::check_signed_transfer(&envelope, raw, &pay_to, tollgate_fuzz::evm_transaction::CHAIN_ID, 100_000).unwrap();

    let encoded = tollgate_fuzz::solana_native::transaction(&seed("solana_native", "transfer"), None).unwrap();
    let tx = solana::decode(&encoded).unwrap();
    let pay_to = tollgate_fuzz::solana_native::pay_to();
    solana::check_signed_transfer(&tx, &pay_to, tollgate_fuzz::solana_native::PRICE).unwrap();

    let sponsor = tollgate_fuzz::solana_sponsored::sponsor();
    for (name, memo) in [("transfer-checked", None), ("with-memo", Some(tollgate_fuzz::solana_sponsored::MEMO))] {
        let encoded =
            tollgate_fuzz::solana_native::transaction(&seed("solana_sponsored", name), Some(&sponsor)).unwrap();
        let tx = solana::decode(&encoded).unwrap();
        spl::check_sponsored_transfer(&tx, &sponsor, &spl::SponsorPolicy::default(), memo).unwrap();
    }

    let asset = tollgate_protocol::x402::Asset::Token(tollgate_fuzz::evm_payload::TOKEN.parse().unwrap());
    for name in [
        "v1-exact-evm",
        "v2-exact-evm",
        "v2-permit2",
        "v2-permit2-eip2612",
        "v2-permit2-approval",
        "v2-upto",
        "v1-native-evm",
        "v2-native-receipt",
    ] {
        let payload = serde_json::from_slice(&seed("evm_payload", name)).unwrap();
        let proof = tollgate_facilitator::chains::evm::decode(&payload, &asset);
        assert!(proof.id().is_some(), "{name} is claimed under no identity");
    }
    let payload = serde_json::from_slice(&seed("evm_payload", "v2-exact-solana")).unwrap();
    assert!(tollgate_facilitator::chains::solana::decode(&payload).id().is_some());

    let voucher: serde_json::Value = serde_json::from_slice(&seed("batch", "voucher")).unwrap();
    let read = tollgate_protocol::x402::batch::BatchPayload::from_value(&voucher).unwrap();
    let (config, voucher) = read.channel().unwrap();
    tollgate_fuzz::batch::terms().bind(config, &voucher.channel_id).unwrap();

    let file =
        tollgate_proxy::ProxyFile::parse(std::str::from_utf8(&seed("proxy_config", "example-built")).unwrap()).unwrap();
    tollgate_proxy::routes::Routes::build(&file, &tollgate::TaskTracker::new(), None).unwrap();

    let header = String::from_utf8(seed("siwx", "sign-in")).unwrap();
    let sign_in = tollgate_protocol::siwx::SignIn::from_header(&header).unwrap();
    assert!(tollgate_protocol::siwx::message(&sign_in).is_some());
    let mint = seed("solana_token", "mint-2022-fee");
    let read = tollgate_facilitator::chains::solana::token::parse_mint(
        &tollgate_facilitator::chains::solana::token::TOKEN_2022_PROGRAM,
        &mint[1..],
    )
    .unwrap();
    assert!(read.refusal().is_some());
}
