//! The seed corpora: for each target, valid inputs made the way the tests and the clients make
//! them (signed transfers, payloads of every scheme, mints with extensions, a proxy file), plus
//! a few near misses. AFL++ mutates from these; `tests/replay.rs` runs them all.

use alloy::primitives::{Address as EvmAddress, U256};
use alloy::signers::local::PrivateKeySigner;
use base64::Engine as _;
use serde_json::{Value, json};
use solana_sdk::hash::Hash;
use solana_sdk::message::{Message, VersionedMessage, v0};
use solana_sdk::pubkey::Pubkey;
use solana_sdk::signer::Signer as _;
use tollgate_facilitator::chains::evm::build::{Transfer as EvmTransfer, sign};
use tollgate_protocol::x402::header;

use crate::{batch, evm_payload, evm_transaction, solana_native, solana_sponsored};

/// `(target, seed name, bytes)` for every seed.
#[must_use]
pub fn all() -> Vec<(&'static str, String, Vec<u8>)> {
    let mut seeds = Vec::new();
    let mut add = |target: &'static str, name: &str, bytes: Vec<u8>| seeds.push((target, name.to_owned(), bytes));
    for (name, payload) in payloads() {
        add("payment_header", name, header::encode(&payload).expect("a payload encodes").into_bytes());
        add("evm_payload", name, payload.to_string().into_bytes());
        add("mcp_payment", name, payload.to_string().into_bytes());
        add("payment_header", &format!("{name}-request"), request(&payload).to_string().into_bytes());
    }
    add("mcp_payment", "not-a-payload", br#"{"hello":"world"}"#.to_vec());
    for text in
        ["0.01", "1e-3", "100", "2.5E+2", "0", "340282366920938463463374607431768211455", "0.000001", "-1", "1.", ".5"]
    {
        add("amount", text, text.as_bytes().to_vec());
    }
    for (name, raw) in evm_transactions() {
        add("evm_transaction", name, raw);
    }
    for (name, message) in native_messages() {
        add("solana_native", name, bincode::serialize(&message).expect("a message encodes"));
    }
    let signed = solana_native::sign(native_messages().remove(0).1, None);
    let mut raw = vec![0xff];
    raw.extend(bincode::serialize(&signed).expect("a transaction encodes"));
    add("solana_native", "raw-transaction", raw);
    for (name, message, memo) in sponsored_messages() {
        let mut bytes = bincode::serialize(&message).expect("a message encodes");
        bytes.push(u8::from(memo));
        add("solana_sponsored", name, bytes);
    }
    for (name, bytes) in token_accounts() {
        add("solana_token", name, bytes);
    }
    add("siwx", "sign-in", sign_in().into_bytes());
    add("siwx", "origin", b"https://Shop.Example:443/".to_vec());
    for (name, value) in batch_payloads() {
        add("batch", name, value.to_string().into_bytes());
    }
    for (name, text) in [
        ("capture", "/reports/{id}\n/reports/42\napi.example.com\nformat=pdf&x=1"),
        ("rest", "/files/{*path}\n/files/a/b%20c/d\nAPI.Example.com.:8080\nq=a+b&q=%41"),
        ("escaped", "/{name}\n/a%3Fb%23c\n[::1]:80\n;a=b"),
    ] {
        add("proxy_request", name, text.as_bytes().to_vec());
    }
    add("proxy_config", "example", PROXY_FILE.as_bytes().to_vec());
    add("proxy_config", "example-built", proxy_file_built().into_bytes());
    seeds
}

const NETWORK_EVM: &str = "eip155:84532";
const NETWORK_SOLANA: &str = "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1";

fn hex(bytes: &[u8]) -> String {
    format!("0x{}", alloy::primitives::hex::encode(bytes))
}

fn requirement(scheme: &str, network: &str, asset: &str, pay_to: &str, extra: Value) -> Value {
    json!({"scheme": scheme, "network": network, "amount": "10000", "asset": asset, "payTo": pay_to,
           "maxTimeoutSeconds": 60, "extra": extra})
}

fn v2(accepted: Value, payload: Value, extensions: Value) -> Value {
    json!({"x402Version": 2, "resource": {"url": "https://shop.example/report", "description": "A report",
           "mimeType": "application/json"}, "accepted": accepted, "payload": payload, "extensions": extensions})
}

fn payer() -> PrivateKeySigner {
    PrivateKeySigner::from_bytes(&[0x11; 32].into()).expect("a fixed key")
}

fn pay_to_evm() -> String {
    format!("{:#x}", evm_transaction::PAY_TO)
}

/// A payload of every scheme, both versions.
fn payloads() -> Vec<(&'static str, Value)> {
    let from = format!("{:#x}", payer().address());
    let token = evm_payload::TOKEN;
    let pay_to = pay_to_evm();
    let authorization = json!({"from": from, "to": pay_to, "value": "10000", "validAfter": "0",
        "validBefore": "4102444800", "nonce": format!("0x{}", "ab".repeat(32))});
    let exact = json!({"signature": hex(&[0x1b; 65]), "authorization": authorization});
    let permit2 = |facilitator: Option<&str>| {
        let mut witness = json!({"to": pay_to, "validAfter": "0"});
        if let Some(f) = facilitator {
            witness["facilitator"] = json!(f);
        }
        json!({"signature": hex(&[0x1c; 65]), "permit2Authorization": {"from": from,
            "permitted": {"token": token, "amount": "10000"}, "spender": "0x4020615294c913F045dc10f0a5cdEbd86c280001",
            "nonce": "123456789", "deadline": "4102444800", "witness": witness}})
    };
    let exact_req = requirement("exact", NETWORK_EVM, token, &pay_to, json!({"name": "USDC", "version": "2"}));
    let permit_req = requirement("exact", NETWORK_EVM, token, &pay_to, json!({"assetTransferMethod": "permit2"}));
    let upto_req = requirement("upto", NETWORK_EVM, token, &pay_to, json!({}));
    let approval = evm_transactions().remove(0).1;
    let sponsoring = json!({"eip2612GasSponsoring": {"info": {"from": from, "asset": token,
        "spender": "0x000000000022D473030F116dDEE9F6B43aC78BA3", "amount": "10000", "nonce": "0",
        "deadline": "4102444800", "signature": hex(&[0x1b; 65]), "version": "1"}}});
    let approving = json!({"erc20ApprovalGasSponsoring": {"info": {"from": from, "asset": token,
        "spender": "0x000000000022D473030F116dDEE9F6B43aC78BA3", "amount": "1000000",
        "signedTransaction": hex(&approval), "version": "1"}}});
    let native_tx = json!({"transaction": hex(&evm_transactions().remove(0).1)});
    let receipt = json!({"receipt": {"transaction": format!("0x{}", "cd".repeat(32)), "from": from,
        "signature": hex(&[0x1b; 65]), "resource": "https://shop.example/report"}});
    let native_req = requirement("exact-native", NETWORK_EVM, "native", &pay_to, json!({}));
    let solana_tx = base64::engine::general_purpose::STANDARD.encode(
        bincode::serialize(&solana_native::sign(sponsored_messages().remove(0).1, Some(&solana_sponsored::sponsor())))
            .expect("a transaction encodes"),
    );
    let seller = Pubkey::new_from_array([0x5e; 32]).to_string();
    let solana_req = requirement(
        "exact",
        NETWORK_SOLANA,
        &Pubkey::new_from_array([0x0c; 32]).to_string(),
        &seller,
        json!({"feePayer": solana_sponsored::sponsor().to_string()}),
    );
    vec![
        ("v1-exact-evm", json!({"x402Version": 1, "scheme": "exact", "network": NETWORK_EVM, "payload": exact})),
        ("v2-exact-evm", v2(exact_req, exact.clone(), json!({}))),
        ("v2-permit2", v2(permit_req.clone(), permit2(None), json!({}))),
        ("v2-permit2-eip2612", v2(permit_req.clone(), permit2(None), sponsoring)),
        ("v2-permit2-approval", v2(permit_req, permit2(None), approving)),
        ("v2-upto", v2(upto_req, permit2(Some("0x5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e")), json!({}))),
        (
            "v1-native-evm",
            json!({"x402Version": 1, "scheme": "exact-native", "network": NETWORK_EVM, "payload": native_tx}),
        ),
        ("v2-native-receipt", v2(native_req, receipt, json!({}))),
        ("v2-exact-solana", v2(solana_req, json!({"transaction": solana_tx}), json!({}))),
        (
            "v2-batch-voucher",
            v2(
                requirement("batch-settlement", NETWORK_EVM, token, &pay_to, json!({})),
                batch_payloads().remove(0).1,
                json!({}),
            ),
        ),
    ]
}

/// A `/verify` body around `payload`.
fn request(payload: &Value) -> Value {
    let version = payload["x402Version"].clone();
    let requirements = payload.get("accepted").cloned().unwrap_or_else(|| {
        json!({"scheme": payload["scheme"], "network": payload["network"], "maxAmountRequired": "10000",
            "resource": "https://shop.example/report", "description": "", "mimeType": "application/json",
            "payTo": pay_to_evm(), "maxTimeoutSeconds": 60, "asset": evm_payload::TOKEN})
    });
    json!({"x402Version": version, "paymentPayload": payload, "paymentRequirements": requirements})
}

/// Signed EIP-1559 transfers: a payment, one on another chain, one with call data.
fn evm_transactions() -> Vec<(&'static str, Vec<u8>)> {
    let transfer = EvmTransfer {
        chain_id: evm_transaction::CHAIN_ID,
        nonce: 0,
        to: evm_transaction::PAY_TO,
        value: U256::from(10_000_000_000_000_000u64),
        gas_limit: 21_000,
        max_fee_per_gas: 2_000_000_000,
        max_priority_fee_per_gas: 1_000_000_000,
    };
    let signed = |tx| sign(tx, &payer()).expect("a fixed key signs").0;
    let mut with_data = transfer.tx();
    with_data.input = vec![0xa9, 0x05, 0x9c, 0xbb].into();
    let other_chain = EvmTransfer { chain_id: 1, to: EvmAddress::repeat_byte(0x77), ..transfer };
    vec![
        ("payment", signed(transfer.tx())),
        ("other-chain", signed(other_chain.tx())),
        ("call-data", signed(with_data)),
    ]
}

fn blockhash() -> Hash {
    Hash::new_from_array([0x42; 32])
}

/// Native SOL transfers from the payer: plain, with a priority fee, v0, to someone else.
fn native_messages() -> Vec<(&'static str, VersionedMessage)> {
    let payer = solana_native::keys()[0].pubkey();
    let transfer =
        |to, lamports, priority_fee| tollgate_encoding::solana::Transfer { from: payer, to, lamports, priority_fee };
    let plain = transfer(solana_native::pay_to(), solana_native::PRICE, None);
    let v0 = {
        let ixs =
            [solana_system_interface::instruction::transfer(&payer, &solana_native::pay_to(), solana_native::PRICE)];
        v0::Message::try_compile(&payer, &ixs, &[], blockhash()).expect("a v0 message compiles")
    };
    vec![
        ("transfer", VersionedMessage::Legacy(plain.message(&blockhash()))),
        (
            "priority-fee",
            VersionedMessage::Legacy(transfer(solana_native::pay_to(), 20_000, Some(5_000)).message(&blockhash())),
        ),
        ("v0", VersionedMessage::V0(v0)),
        (
            "elsewhere",
            VersionedMessage::Legacy(transfer(Pubkey::new_from_array([9; 32]), 10_000, None).message(&blockhash())),
        ),
    ]
}

/// Sponsored `TransferChecked`s: plain, with compute budget and memo, Token-2022, naming the sponsor.
fn sponsored_messages() -> Vec<(&'static str, VersionedMessage, bool)> {
    let sponsor = solana_sponsored::sponsor();
    let payer = solana_native::keys()[0].pubkey();
    let mint = Pubkey::new_from_array([0x0c; 32]);
    let program = tollgate_facilitator::chains::solana::token::TOKEN_PROGRAM;
    let source = tollgate_encoding::solana::associated_token_address(&payer, &mint, &program);
    let destination = tollgate_encoding::solana::associated_token_address(&solana_native::pay_to(), &mint, &program);
    let transfer = |program: &Pubkey, authority: &Pubkey| {
        tollgate_encoding::solana::transfer_checked(program, (&source, &mint, &destination), authority, (10_000, 6))
    };
    let budget = solana_compute_budget_interface::ComputeBudgetInstruction::set_compute_unit_limit(20_000);
    let price = solana_compute_budget_interface::ComputeBudgetInstruction::set_compute_unit_price(1);
    let memo = solana_sdk::instruction::Instruction::new_with_bytes(
        tollgate_encoding::solana::MEMO_PROGRAM,
        solana_sponsored::MEMO.as_bytes(),
        vec![],
    );
    let message = |ixs: &[solana_sdk::instruction::Instruction]| {
        VersionedMessage::Legacy(Message::new_with_blockhash(ixs, Some(&sponsor), &blockhash()))
    };
    let token_2022 = tollgate_facilitator::chains::solana::token::TOKEN_2022_PROGRAM;
    vec![
        ("transfer-checked", message(&[budget.clone(), price.clone(), transfer(&program, &payer)]), false),
        ("with-memo", message(&[budget, price, transfer(&program, &payer), memo]), true),
        ("token-2022", message(&[transfer(&token_2022, &payer)]), false),
        ("sponsor-authority", message(&[transfer(&program, &sponsor)]), false),
    ]
}

/// A Token mint, Token-2022 mints with metadata and with a transfer fee, a token account.
fn token_accounts() -> Vec<(&'static str, Vec<u8>)> {
    let mut mint = Vec::with_capacity(82);
    mint.extend(1u32.to_le_bytes());
    mint.extend([7; 32]);
    mint.extend(1_000_000u64.to_le_bytes());
    mint.push(6);
    mint.push(1);
    mint.extend(0u32.to_le_bytes());
    mint.extend([0; 32]);
    let token_2022 = |extensions: &[(u16, Vec<u8>)]| {
        let mut data = mint.clone();
        data.resize(165, 0);
        data.push(1);
        for (kind, value) in extensions {
            data.extend(kind.to_le_bytes());
            data.extend(u16::try_from(value.len()).expect("short").to_le_bytes());
            data.extend(value);
        }
        data
    };
    let mut metadata = vec![0; 64];
    for text in ["Dollar", "USD", "https://x"] {
        metadata.extend(u32::try_from(text.len()).expect("short").to_le_bytes());
        metadata.extend(text.as_bytes());
    }
    let mut fee = vec![0; 72];
    for (epoch, max, bps) in [(0u64, 0u64, 0u16), (5, 1_000, 50)] {
        fee.extend(epoch.to_le_bytes());
        fee.extend(max.to_le_bytes());
        fee.extend(bps.to_le_bytes());
    }
    let mut account = vec![0x0c; 32];
    account.extend([0x5e; 32]);
    account.extend(10_000u64.to_le_bytes());
    account.resize(108, 0);
    account.push(1);
    account.resize(165, 0);
    let with = |selector: u8, data: Vec<u8>| [vec![selector], data].concat();
    vec![
        ("mint", with(0, mint.clone())),
        ("mint-2022-metadata", with(1, token_2022(&[(19, metadata)]))),
        ("mint-2022-fee", with(1, token_2022(&[(1, fee), (9, vec![])]))),
        ("token-account", with(0, account)),
    ]
}

fn sign_in() -> String {
    let json = json!({"domain": "shop.example", "address": format!("{:#x}", payer().address()),
        "statement": "Sign in to use your pass", "uri": "https://shop.example/report", "version": "1",
        "chainId": NETWORK_EVM, "type": "eip191", "nonce": "a1b2c3d4e5f6", "issuedAt": "2026-12-07T10:00:00Z",
        "resources": ["https://shop.example/report"], "signature": hex(&[0x1b; 65])});
    base64::engine::general_purpose::STANDARD.encode(json.to_string())
}

/// A voucher on a channel of the seller's terms (its id the configuration's hash), and a claim.
fn batch_payloads() -> Vec<(&'static str, Value)> {
    let terms = batch::terms();
    let config = json!({"payer": format!("{:#x}", payer().address()), "payerAuthorizer": format!("{:#x}", payer().address()),
        "receiver": format!("{:#x}", terms.receiver), "receiverAuthorizer": format!("{:#x}", terms.receiver_authorizer),
        "token": format!("{:#x}", terms.token), "withdrawDelay": terms.withdraw_delay,
        "salt": format!("0x{}", "00".repeat(32))});
    let wire = tollgate_encoding::batch::wire_config(&serde_json::from_value(config.clone()).expect("a config reads"))
        .expect("a config binds");
    let id = format!("{:#x}", wire.id(terms.chain_id));
    let voucher = json!({"channelId": id, "maxClaimableAmount": "10000", "signature": hex(&[0x1b; 65])});
    vec![
        ("voucher", json!({"type": "voucher", "channelConfig": config, "voucher": voucher})),
        (
            "claim",
            json!({"type": "claim", "claims": [{"voucher": {"channel": config, "maxClaimableAmount": "10000"},
            "signature": hex(&[0x1b; 65]), "totalClaimed": "10000"}]}),
        ),
        (
            "settle",
            json!({"type": "settle", "receiver": format!("{:#x}", terms.receiver), "token": format!("{:#x}", terms.token)}),
        ),
    ]
}

/// The proxy's example file, as shipped.
const PROXY_FILE: &str = include_str!("../../proxy/examples/proxy.toml");

/// The example without what reads the environment (the harness builds only such files).
fn proxy_file_built() -> String {
    PROXY_FILE.lines().filter(|l| !l.contains("_env") && !l.contains("[identity]")).collect::<Vec<_>>().join("\n")
}
