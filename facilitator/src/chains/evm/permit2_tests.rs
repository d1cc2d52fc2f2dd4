//! What a Permit2 payload binds, checked without the chain (unit tests of [`super`]): each rule
//! at its edge, the amount each method charges, the offered approval's parties, and the call
//! that settles it.

use super::*;
use serde_json::json;

const FROM: Address = Address::repeat_byte(0xf0);
const TOKEN: Address = Address::repeat_byte(0x70);
const PAY_TO: Address = Address::repeat_byte(0x5e);
const SENDER: Address = Address::repeat_byte(0xfa);
const CHAIN_ID: u64 = 84_532;
const NOW: u64 = 1_000;
const MARGIN: u64 = 6;

fn transfer(method: Method) -> Transfer {
    Transfer {
        method,
        from: FROM,
        token: TOKEN,
        permitted: U256::from(1_000u64),
        spender: method.proxy(),
        nonce: U256::from(7u64),
        deadline: U256::from(2_000u64),
        to: PAY_TO,
        facilitator: (method == Method::Upto).then_some(SENDER),
        valid_after: U256::from(100u64),
        signature: vec![0x1b; 65],
        eip2612: None,
        approval: None,
    }
}

fn eip2612() -> Eip2612 {
    Eip2612 {
        from: Some(FROM),
        asset: Some(TOKEN),
        spender: Some(PERMIT2),
        value: U256::from(1_000u64),
        deadline: U256::from(2_000u64),
        r: B256::repeat_byte(1),
        s: B256::repeat_byte(2),
        v: 27,
    }
}

fn bound(t: &Transfer) -> Result<(), Reason> {
    t.bound((TOKEN, PAY_TO, SENDER), U256::from(NOW), U256::from(MARGIN)).map_err(|r| r.reason)
}

#[test]
fn what_a_permit_binds_holds_at_each_edge() {
    for method in [Method::Exact, Method::Upto] {
        let ok = transfer(method);
        assert_eq!(bound(&ok), Ok(()), "{method:?}");
        let with = |change: &dyn Fn(&mut Transfer)| {
            let mut t = transfer(method);
            change(&mut t);
            bound(&t)
        };
        let other = if method == Method::Exact { Method::Upto } else { Method::Exact };
        assert_eq!(with(&|t| t.spender = other.proxy()), Err(Reason::Permit2Spender), "the other method's proxy");
        assert_eq!(with(&|t| t.spender = PERMIT2), Err(Reason::Permit2Spender));
        assert_eq!(with(&|t| t.from = Address::ZERO), Err(Reason::Permit2Signature));
        assert_eq!(with(&|t| t.to = FROM), Err(Reason::Permit2Recipient));
        // Valid until at least now + margin; valid from at most now.
        assert_eq!(with(&|t| t.deadline = U256::from(NOW + MARGIN)), Ok(()));
        assert_eq!(with(&|t| t.deadline = U256::from(NOW + MARGIN - 1)), Err(Reason::Permit2DeadlineExpired));
        assert_eq!(with(&|t| t.valid_after = U256::from(NOW)), Ok(()));
        assert_eq!(with(&|t| t.valid_after = U256::from(NOW + 1)), Err(Reason::Permit2NotYetValid));
        assert_eq!(with(&|t| t.token = PAY_TO), Err(Reason::Permit2TokenMismatch));
        // A deadline near the top of uint256 does not wrap around.
        assert_eq!(with(&|t| t.deadline = U256::MAX), Ok(()));
    }
    // Only the facilitator the upto witness names may settle it.
    let mut upto = transfer(Method::Upto);
    upto.facilitator = Some(FROM);
    assert_eq!(bound(&upto), Err(Reason::UptoFacilitatorMismatch));
    upto.facilitator = None;
    assert_eq!(bound(&upto), Err(Reason::UptoFacilitatorMismatch));
}

#[test]
fn an_offered_eip2612_permit_is_the_payers_for_permit2_and_the_amount() {
    let with = |change: &dyn Fn(&mut Eip2612)| {
        let mut p = eip2612();
        change(&mut p);
        let t = Transfer { eip2612: Some(p), ..transfer(Method::Exact) };
        bound(&t)
    };
    assert_eq!(with(&|_| {}), Ok(()));
    assert_eq!(with(&|p| p.from = Some(PAY_TO)), Err(Reason::Eip2612From));
    assert_eq!(with(&|p| p.from = None), Err(Reason::Eip2612From));
    assert_eq!(with(&|p| p.asset = Some(PAY_TO)), Err(Reason::Eip2612Asset));
    assert_eq!(with(&|p| p.spender = Some(EXACT_PROXY)), Err(Reason::Eip2612Spender));
    assert_eq!(with(&|p| p.deadline = U256::from(NOW + MARGIN)), Ok(()));
    assert_eq!(with(&|p| p.deadline = U256::from(NOW + MARGIN - 1)), Err(Reason::Eip2612Deadline));
    assert_eq!(with(&|p| p.value = U256::from(999u64)), Err(Reason::Eip2612Format));
    assert_eq!(with(&|p| p.value = U256::from(1_001u64)), Err(Reason::Eip2612Format));
}

#[test]
fn exact_moves_the_price_and_upto_at_most_what_was_allowed() {
    let exact = transfer(Method::Exact);
    let charge = |t: &Transfer, price: Price, intent| t.charge(&price, 6, intent).map_err(|r| r.reason);
    for intent in [Intent::Verify, Intent::Settle] {
        assert_eq!(charge(&exact, Price::Exactly(1_000), intent), Ok(1_000));
        assert_eq!(charge(&exact, Price::Exactly(999), intent), Err(Reason::Permit2AmountMismatch));
        assert_eq!(charge(&exact, Price::Exactly(1_001), intent), Err(Reason::Permit2AmountMismatch));
    }
    let huge = Transfer { permitted: U256::MAX, ..transfer(Method::Exact) };
    assert_eq!(charge(&huge, Price::Exactly(1_000), Intent::Settle), Err(Reason::Permit2AmountMismatch));

    let upto = transfer(Method::Upto);
    // Verified: the permit allows exactly the most the seller may charge.
    assert_eq!(charge(&upto, Price::Exactly(1_000), Intent::Verify), Ok(1_000));
    assert_eq!(charge(&upto, Price::Exactly(999), Intent::Verify), Err(Reason::Permit2AmountMismatch));
    assert_eq!(charge(&upto, Price::Exactly(1_001), Intent::Verify), Err(Reason::Permit2AmountMismatch));
    // Settled: what was charged, up to the permitted amount, never nothing.
    assert_eq!(charge(&upto, Price::Exactly(1_000), Intent::Settle), Ok(1_000));
    assert_eq!(charge(&upto, Price::Exactly(1), Intent::Settle), Ok(1));
    assert_eq!(charge(&upto, Price::Exactly(1_001), Intent::Settle), Err(Reason::UptoSettlementExceeds));
    assert_eq!(charge(&upto, Price::Exactly(0), Intent::Settle), Err(Reason::InvalidPaymentRequirements));
    assert_eq!(charge(&upto, Price::AtLeastAtomic(1), Intent::Settle), Err(Reason::InvalidPaymentRequirements));
}

fn approval() -> Approval {
    Approval {
        from: Some(FROM),
        asset: Some(TOKEN),
        spender: Some(PERMIT2),
        signer: FROM,
        nonce: 0,
        target: Some(TOKEN),
        approves: Some((PERMIT2, U256::from(1_000u64))),
        chain_id: CHAIN_ID,
        max_fee_per_gas: 1,
        gas_cost: 21_000,
        raw: vec![],
        hash: B256::ZERO,
    }
}

#[test]
fn an_offered_approval_is_the_payers_of_the_token_to_permit2_on_this_chain() {
    let with = |change: &dyn Fn(&mut Approval)| {
        let mut a = approval();
        change(&mut a);
        a.bound((FROM, TOKEN, U256::from(1_000u64)), CHAIN_ID).map_err(|r| r.reason)
    };
    assert_eq!(with(&|_| {}), Ok(()));
    assert_eq!(with(&|a| a.approves = Some((PERMIT2, U256::from(5_000u64)))), Ok(()), "more than needed");
    assert_eq!(with(&|a| a.from = Some(PAY_TO)), Err(Reason::Erc20ApprovalFrom));
    assert_eq!(with(&|a| a.signer = PAY_TO), Err(Reason::Erc20ApprovalSigner));
    assert_eq!(with(&|a| a.asset = Some(PAY_TO)), Err(Reason::Erc20ApprovalAsset));
    assert_eq!(with(&|a| a.target = Some(PAY_TO)), Err(Reason::Erc20ApprovalAsset), "sent to another contract");
    assert_eq!(with(&|a| a.target = None), Err(Reason::Erc20ApprovalAsset), "a contract creation");
    assert_eq!(with(&|a| a.spender = Some(EXACT_PROXY)), Err(Reason::Erc20ApprovalSpender));
    let approves_proxy = |a: &mut Approval| a.approves = Some((EXACT_PROXY, U256::from(1_000u64)));
    assert_eq!(with(&approves_proxy), Err(Reason::Erc20ApprovalSpender));
    let too_little = |a: &mut Approval| a.approves = Some((PERMIT2, U256::from(999u64)));
    assert_eq!(with(&too_little), Err(Reason::Erc20ApprovalCalldata));
    assert_eq!(with(&|a| a.approves = None), Err(Reason::Erc20ApprovalCalldata));
    assert_eq!(with(&|a| a.chain_id = 1), Err(Reason::Erc20ApprovalTxFailed));
}

#[test]
fn uint256_in_decimal_or_hex() {
    assert_eq!(parse_uint256("255"), Some(U256::from(255u64)));
    assert_eq!(parse_uint256("0xff"), Some(U256::from(255u64)));
    assert_eq!(parse_uint256("ff"), None);
    assert_eq!(parse_uint256("0xfg"), None);
    assert_eq!(parse_uint256(&U256::MAX.to_string()), Some(U256::MAX));
    let above = "115792089237316195423570985008687907853269984665640564039457584007913129639936";
    assert_eq!(parse_uint256(above), None, "2^256");
}

#[test]
fn identity_digest_and_call_name_what_was_signed() {
    let exact = transfer(Method::Exact);
    let network = Network::eip155(CHAIN_ID);
    assert_eq!(exact.identity(&network), format!("eip155:84532:permit2:{FROM:#x}:0x7"));

    // The digest changes with what the payer signs: the method, the facilitator, the chain.
    let upto = transfer(Method::Upto);
    let digest = exact.digest(CHAIN_ID);
    assert_ne!(digest, B256::ZERO);
    assert_ne!(digest, exact.digest(1));
    assert_ne!(digest, Transfer { to: FROM, ..transfer(Method::Exact) }.digest(CHAIN_ID));
    assert_ne!(upto.digest(CHAIN_ID), Transfer { spender: EXACT_PROXY, ..transfer(Method::Upto) }.digest(CHAIN_ID));
    assert_ne!(upto.digest(CHAIN_ID), Transfer { facilitator: Some(FROM), ..transfer(Method::Upto) }.digest(CHAIN_ID));

    // exact settles the permitted amount, upto the amount charged; with a permit, through
    // settleWithPermit.
    use wire::exact::ExactProxy;
    use wire::upto::UptoProxy;
    let call = ExactProxy::settleCall::abi_decode(&exact.call_data(U256::from(1_000u64))).unwrap();
    assert_eq!((call.owner, call.witness.to, call.permit.nonce), (FROM, PAY_TO, U256::from(7u64)));
    assert_eq!((call.permit.permitted.token, call.permit.permitted.amount), (TOKEN, U256::from(1_000u64)));
    assert_eq!(call.signature.as_ref(), [0x1b; 65].as_slice());
    let call = UptoProxy::settleCall::abi_decode(&upto.call_data(U256::from(400u64))).unwrap();
    assert_eq!((call.amount, call.witness.facilitator, call.owner), (U256::from(400u64), SENDER, FROM));
    let with_permit = Transfer { eip2612: Some(eip2612()), ..transfer(Method::Exact) };
    let call = ExactProxy::settleWithPermitCall::abi_decode(&with_permit.call_data(U256::from(1_000u64))).unwrap();
    assert_eq!((call.permit2612.value, call.permit2612.v), (U256::from(1_000u64), 27));
    let with_permit = Transfer { eip2612: Some(eip2612()), ..transfer(Method::Upto) };
    let call = UptoProxy::settleWithPermitCall::abi_decode(&with_permit.call_data(U256::from(400u64))).unwrap();
    assert_eq!((call.amount, call.permit2612.r), (U256::from(400u64), B256::repeat_byte(1)));
}

/// A v2 payload of the Permit2 shape, with `witness` and `extensions` as given.
fn payload(witness: serde_json::Value, nonce: &str, extensions: serde_json::Value) -> PaymentPayload {
    let proxy = format!("{EXACT_PROXY:#x}");
    serde_json::from_value(json!({
        "x402Version": 2,
        "accepted": {"scheme": "exact", "network": "eip155:84532", "amount": "1000", "asset": format!("{TOKEN:#x}"),
            "payTo": format!("{PAY_TO:#x}"), "maxTimeoutSeconds": 60, "extra": {"assetTransferMethod": "permit2"}},
        "payload": {"signature": format!("0x{}", "1b".repeat(65)), "permit2Authorization": {
            "from": format!("{FROM:#x}"), "permitted": {"token": format!("{TOKEN:#x}"), "amount": "1000"},
            "spender": proxy, "nonce": nonce, "deadline": "2000", "witness": witness}},
        "extensions": extensions,
    }))
    .unwrap()
}

#[test]
fn a_payload_is_read_as_its_method_asks() {
    let to = format!("{PAY_TO:#x}");
    let plain = json!({"to": to, "validAfter": "100"});
    let naming = json!({"to": to, "validAfter": "100", "facilitator": format!("{SENDER:#x}")});
    let t = read(&payload(plain.clone(), "7", json!({})), Method::Exact).unwrap();
    assert_eq!((t.from, t.token, t.to, t.nonce), (FROM, TOKEN, PAY_TO, U256::from(7u64)));
    assert_eq!(
        (t.permitted, t.deadline, t.valid_after),
        (U256::from(1_000u64), U256::from(2_000u64), U256::from(100u64))
    );
    assert_eq!(bound(&t), Ok(()));
    assert_eq!(read(&payload(plain.clone(), "0x7", json!({})), Method::Exact).unwrap().nonce, U256::from(7u64));
    let upto = read(&payload(naming.clone(), "7", json!({})), Method::Upto).unwrap();
    assert_eq!(upto.facilitator, Some(SENDER));

    let refused = |p: PaymentPayload, method| read(&p, method).err().map(|r| r.reason);
    assert_eq!(refused(payload(plain.clone(), "7", json!({})), Method::Upto), Some(Reason::InvalidPayload));
    assert_eq!(refused(payload(naming, "7", json!({})), Method::Exact), Some(Reason::InvalidPayload));
    assert_eq!(refused(payload(plain.clone(), "seven", json!({})), Method::Exact), Some(Reason::InvalidPayload));
    let mut bad_signature = payload(plain, "7", json!({}));
    if let PaymentPayload::V2(v2) = &mut bad_signature {
        v2.payload["signature"] = json!("0xzz");
    }
    assert_eq!(refused(bad_signature, Method::Exact), Some(Reason::InvalidPayload), "the shape's own check");
}

/// An EIP-2612 permit offered in the extensions is read (and settles in the same call); without
/// one, nothing is read.
#[test]
fn an_offered_eip2612_permit_is_read_from_the_extensions() {
    let plain = json!({"to": format!("{PAY_TO:#x}"), "validAfter": "100"});
    let sponsoring = json!({"eip2612GasSponsoring": {"info": {"from": format!("{FROM:#x}"),
        "asset": format!("{TOKEN:#x}"), "spender": format!("{PERMIT2:#x}"), "amount": "1000", "nonce": "0",
        "deadline": "2000", "signature": format!("0x{}{}1b", "01".repeat(32), "02".repeat(32)), "version": "1"}}});
    let t = read(&payload(plain.clone(), "7", sponsoring), Method::Exact).unwrap();
    let p = t.eip2612.as_ref().expect("the permit is read");
    assert_eq!((p.from, p.asset, p.spender), (Some(FROM), Some(TOKEN), Some(PERMIT2)));
    assert_eq!((p.value, p.deadline, p.v), (U256::from(1_000u64), U256::from(2_000u64), 0x1b));
    assert_eq!((p.r, p.s), (B256::repeat_byte(1), B256::repeat_byte(2)));
    assert_eq!(bound(&t), Ok(()));
    assert!(t.approval.is_none());
    assert!(read(&payload(plain, "7", json!({})), Method::Exact).unwrap().eip2612.is_none());
}
