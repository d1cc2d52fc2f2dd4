//! Sponsored-transaction rules against hostile shapes (unit tests of [`super`]).

use super::*;
use solana_sdk::instruction::{AccountMeta, Instruction};
use solana_sdk::message::{Message, VersionedMessage};
use solana_sdk::signature::Keypair;
use solana_sdk::signer::Signer as _;

/// A `TransferChecked` instruction.
pub(crate) fn transfer_checked_ix(
    program: &Pubkey,
    (source, mint, destination, authority): (&Pubkey, &Pubkey, &Pubkey, &Pubkey),
    amount: u64,
    decimals: u8,
) -> Instruction {
    tollgate_encoding::solana::transfer_checked(program, (source, mint, destination), authority, (amount, decimals))
}

/// A transaction with `sponsor` as fee payer, signed by `signers` (not the sponsor).
pub(crate) fn sponsored(sponsor: &Pubkey, signers: &[&Keypair], instructions: &[Instruction]) -> VersionedTransaction {
    let blockhash = Hash::new_unique();
    let message = Message::new_with_blockhash(instructions, Some(sponsor), &blockhash);
    let mut tx = solana_sdk::transaction::Transaction::new_unsigned(message);
    // Sign with those of `signers` the message names as signers (a hostile shape may leave
    // the payer out).
    let bytes = tx.message.serialize();
    for signer in signers {
        if let Some(i) = tx.message.account_keys.iter().position(|k| *k == signer.pubkey())
            && tx.message.is_signer(i)
        {
            tx.signatures[i] = signer.sign_message(&bytes);
        }
    }
    VersionedTransaction::from(tx)
}

struct Case {
    sponsor: Keypair,
    buyer: Keypair,
    mint: Pubkey,
    seller: Pubkey,
}

impl Case {
    fn new() -> Self {
        Self {
            sponsor: Keypair::new(),
            buyer: Keypair::new(),
            mint: Pubkey::new_unique(),
            seller: Pubkey::new_unique(),
        }
    }

    fn pay(&self, amount: u64) -> Instruction {
        let source = associated_token_address(&self.buyer.pubkey(), &self.mint, &TOKEN_PROGRAM);
        let dest = associated_token_address(&self.seller, &self.mint, &TOKEN_PROGRAM);
        transfer_checked_ix(&TOKEN_PROGRAM, (&source, &self.mint, &dest, &self.buyer.pubkey()), amount, 6)
    }

    fn tx(&self, instructions: &[Instruction]) -> VersionedTransaction {
        sponsored(&self.sponsor.pubkey(), &[&self.buyer], instructions)
    }

    fn check(&self, tx: &VersionedTransaction) -> Result<SponsoredTransfer, Refusal> {
        check_sponsored_transfer(tx, &self.sponsor.pubkey(), &SponsorPolicy::default(), None)
    }
}

#[test]
fn a_plain_sponsored_payment_passes() {
    let c = Case::new();
    let budget = [
        solana_compute_budget_interface::ComputeBudgetInstruction::set_compute_unit_limit(20_000),
        solana_compute_budget_interface::ComputeBudgetInstruction::set_compute_unit_price(1_000),
    ];
    let memo = Instruction::new_with_bytes(MEMO_V2, b"order 7", vec![]);
    let tx = c.tx(&[budget[0].clone(), budget[1].clone(), c.pay(1_000_000), memo]);
    let ok = c.check(&tx).unwrap();
    assert_eq!(ok.transfer.amount, 1_000_000);
    assert_eq!(ok.transfer.authority, c.buyer.pubkey());
    assert_eq!(ok.transfer.destination, associated_token_address(&c.seller, &c.mint, &TOKEN_PROGRAM));
    // The proof's identity is the payer's signature, the first after the sponsor's slot.
    assert_eq!(super::super::exact::identity(&tx), Some(tx.signatures[1].to_string()));
}

/// x402's current rules: up to 7 instructions (a wallet's Lighthouse assertions included), and
/// the memo a requirement asks for in `extra.memo`.
#[test]
fn seven_instructions_with_lighthouse_pass_and_an_asked_memo_is_required() {
    use solana_compute_budget_interface::ComputeBudgetInstruction as Cb;
    let c = Case::new();
    let lighthouse = |tag: u8| Instruction::new_with_bytes(LIGHTHOUSE, &[tag], vec![]);
    let memo = Instruction::new_with_bytes(MEMO_V2, b"order-42", vec![]);
    let seven = c.tx(&[
        Cb::set_compute_unit_limit(40_000),
        Cb::set_compute_unit_price(1),
        c.pay(1_000_000),
        memo,
        lighthouse(1),
        lighthouse(2),
        lighthouse(3),
    ]);
    assert_eq!(seven.message.instructions().len(), 7);
    c.check(&seven).unwrap();
    let policy = SponsorPolicy::default();
    let sponsor = c.sponsor.pubkey();
    check_sponsored_transfer(&seven, &sponsor, &policy, Some("order-42")).unwrap();
    let other = check_sponsored_transfer(&seven, &sponsor, &policy, Some("order-43")).unwrap_err();
    assert_eq!(other.reason, Reason::SvmInstructions, "{other}");
    let bare = c.tx(&[Cb::set_compute_unit_limit(20_000), c.pay(1_000_000)]);
    assert!(check_sponsored_transfer(&bare, &sponsor, &policy, Some("order-42")).is_err(), "no memo at all");
}

/// Every hostile shape is refused with its reason, before anything is signed.
#[test]
fn hostile_sponsored_transactions_are_refused() {
    use solana_compute_budget_interface::ComputeBudgetInstruction as Cb;
    let c = Case::new();
    let sponsor = c.sponsor.pubkey();
    let source = associated_token_address(&c.buyer.pubkey(), &c.mint, &TOKEN_PROGRAM);
    let dest = associated_token_address(&c.seller, &c.mint, &TOKEN_PROGRAM);
    let sponsor_source = associated_token_address(&sponsor, &c.mint, &TOKEN_PROGRAM);
    let drain = solana_system_interface::instruction::transfer(&sponsor, &c.buyer.pubkey(), 1_000_000_000);
    let cases: Vec<(&str, VersionedTransaction, Reason)> = vec![
        (
            "sponsor as transfer authority",
            c.tx(&[
                transfer_checked_ix(&TOKEN_PROGRAM, (&sponsor_source, &c.mint, &dest, &sponsor), 1, 6),
                Instruction::new_with_bytes(MEMO_V2, b"x", vec![AccountMeta::new_readonly(c.buyer.pubkey(), true)]),
            ]),
            Reason::SvmFeePayerTransferring,
        ),
        ("sponsor's SOL moved by a System transfer", c.tx(&[c.pay(1_000_000), drain.clone()]), Reason::SvmInstructions),
        (
            "sponsor named by a memo",
            c.tx(&[
                c.pay(1_000_000),
                Instruction::new_with_bytes(MEMO_V2, b"x", vec![AccountMeta::new(sponsor, true)]),
            ]),
            Reason::SvmFeePayerInAccounts,
        ),
        (
            "sponsor as transfer source",
            c.tx(&[transfer_checked_ix(&TOKEN_PROGRAM, (&sponsor, &c.mint, &dest, &c.buyer.pubkey()), 1, 6)]),
            Reason::SvmFeePayerTransferring,
        ),
        ("two transfers", c.tx(&[c.pay(500_000), c.pay(500_000)]), Reason::SvmInstructionsLength),
        (
            "no transfer",
            c.tx(&[Instruction::new_with_bytes(
                MEMO_V2,
                b"hi",
                vec![AccountMeta::new_readonly(c.buyer.pubkey(), true)],
            )]),
            Reason::SvmNotTransferChecked,
        ),
        (
            "plain Transfer instead of TransferChecked",
            c.tx(&[Instruction::new_with_bytes(
                TOKEN_PROGRAM,
                &[3, 1, 0, 0, 0, 0, 0, 0, 0],
                vec![
                    AccountMeta::new(source, false),
                    AccountMeta::new(dest, false),
                    AccountMeta::new_readonly(c.buyer.pubkey(), true),
                ],
            )]),
            Reason::SvmNotTransferChecked,
        ),
        (
            "unknown program",
            c.tx(&[
                c.pay(1_000_000),
                Instruction::new_with_bytes(Pubkey::new_unique(), &[], vec![AccountMeta::new(c.buyer.pubkey(), true)]),
            ]),
            Reason::SvmInstructions,
        ),
        (
            "compute price above the cap",
            c.tx(&[Cb::set_compute_unit_limit(20_000), Cb::set_compute_unit_price(5_000_001), c.pay(1)]),
            Reason::SvmComputePriceTooHigh,
        ),
        (
            "compute limit above the cap",
            c.tx(&[Cb::set_compute_unit_limit(1_400_000), c.pay(1)]),
            Reason::SvmComputeLimit,
        ),
        (
            "no limit: default units of two instructions exceed the cap",
            c.tx(&[c.pay(1), Instruction::new_with_bytes(MEMO_V2, b"m", vec![])]),
            Reason::SvmComputeLimit,
        ),
        (
            "compute price twice",
            c.tx(&[Cb::set_compute_unit_price(1), Cb::set_compute_unit_price(2), c.pay(1)]),
            Reason::SvmComputePrice,
        ),
        ("heap frame request", c.tx(&[Cb::request_heap_frame(64 * 1024), c.pay(1)]), Reason::SvmInstructions),
        (
            "too many instructions",
            c.tx(&[
                Cb::set_compute_unit_limit(20_000),
                c.pay(1),
                Instruction::new_with_bytes(MEMO_V2, b"1", vec![]),
                Instruction::new_with_bytes(MEMO_V2, b"2", vec![]),
                Instruction::new_with_bytes(MEMO_V2, b"3", vec![]),
                Instruction::new_with_bytes(MEMO_V2, b"4", vec![]),
                Instruction::new_with_bytes(MEMO_V2, b"5", vec![]),
                Instruction::new_with_bytes(MEMO_V2, b"6", vec![]),
                Instruction::new_with_bytes(MEMO_V2, b"7", vec![]),
            ]),
            Reason::SvmInstructionsLength,
        ),
        ("another fee payer", sponsored(&c.buyer.pubkey(), &[&c.buyer], &[c.pay(1)]), Reason::SvmTransaction),
    ];
    for (name, tx, reason) in cases {
        let refusal = c.check(&tx).unwrap_err();
        assert_eq!(refusal.reason, reason, "{name}: {refusal}");
    }

    // Signed by the sponsor already (its slot must be empty), or tampered after signing.
    let mut presigned = c.tx(&[Cb::set_compute_unit_limit(20_000), c.pay(1)]);
    presigned.signatures[0] = c.sponsor.sign_message(&presigned.message.serialize());
    assert_eq!(c.check(&presigned).unwrap_err().reason, Reason::SvmTransaction);
    let mut tampered = c.tx(&[Cb::set_compute_unit_limit(20_000), c.pay(1)]);
    if let VersionedMessage::Legacy(m) = &mut tampered.message {
        m.instructions[1].data[1] ^= 1;
    }
    assert!(c.check(&tampered).unwrap_err().message.contains("does not verify"));
    // Unsigned by the payer.
    let unsigned = sponsored(&sponsor, &[], &[Cb::set_compute_unit_limit(20_000), c.pay(1)]);
    assert_eq!(c.check(&unsigned).unwrap_err().reason, Reason::SvmTransaction);
}

/// Each rule of the sponsor's checks at its edge: one signer more, one instruction more, one
/// compute unit or micro-lamport more than allowed, a data byte more or less.
#[test]
fn sponsored_rules_hold_at_their_edges() {
    use solana_compute_budget_interface::ComputeBudgetInstruction as Cb;
    let c = Case::new();
    let sponsor = c.sponsor.pubkey();
    let policy = SponsorPolicy { max_compute_units: 30_000, max_compute_unit_price: 10 };
    let check = |tx: &VersionedTransaction| check_sponsored_transfer(tx, &sponsor, &policy, None);

    // Compute units and price: the cap itself passes, one more does not.
    check(&c.tx(&[Cb::set_compute_unit_limit(30_000), Cb::set_compute_unit_price(10), c.pay(1)])).unwrap();
    let units = check(&c.tx(&[Cb::set_compute_unit_limit(30_001), c.pay(1)])).unwrap_err();
    assert_eq!(units.reason, Reason::SvmComputeLimit, "{units}");
    let price = check(&c.tx(&[Cb::set_compute_unit_limit(30_000), Cb::set_compute_unit_price(11), c.pay(1)]));
    assert_eq!(price.unwrap_err().reason, Reason::SvmComputePriceTooHigh);
    // Without a limit, one instruction's default (200,000 units) is what the sponsor pays for.
    let roomy = SponsorPolicy { max_compute_units: 200_000, max_compute_unit_price: 10 };
    check_sponsored_transfer(&c.tx(&[c.pay(1)]), &sponsor, &roomy, None).unwrap();
    let tight = SponsorPolicy { max_compute_units: 199_999, ..roomy };
    let default = check_sponsored_transfer(&c.tx(&[c.pay(1)]), &sponsor, &tight, None).unwrap_err();
    assert_eq!(default.reason, Reason::SvmComputeLimit, "{default}");

    // Signers: the sponsor and the payer pass, a third co-signer passes, a fourth does not.
    let cosigners: Vec<Keypair> = (0..2).map(|_| Keypair::new()).collect();
    let memo_signed_by = |who: &[&Keypair]| {
        let accounts = who.iter().map(|k| AccountMeta::new_readonly(k.pubkey(), true)).collect();
        Instruction::new_with_bytes(MEMO_V2, b"co", accounts)
    };
    let three = sponsored(
        &sponsor,
        &[&c.buyer, &cosigners[0]],
        &[Cb::set_compute_unit_limit(20_000), c.pay(1), memo_signed_by(&[&cosigners[0]])],
    );
    assert_eq!(three.message.header().num_required_signatures, 3);
    check(&three).unwrap();
    let four = sponsored(
        &sponsor,
        &[&c.buyer, &cosigners[0], &cosigners[1]],
        &[Cb::set_compute_unit_limit(20_000), c.pay(1), memo_signed_by(&[&cosigners[0], &cosigners[1]])],
    );
    assert_eq!(check(&four).unwrap_err().reason, Reason::SvmTransaction);
    // A co-signer's slot left empty is a signature that does not verify.
    let mut unsigned_cosigner = three.clone();
    unsigned_cosigner.signatures[2] = Signature::default();
    assert!(check(&unsigned_cosigner).unwrap_err().message.contains("does not verify"));

    // An address lookup table, however harmless its entries, is refused.
    let legacy = c.tx(&[Cb::set_compute_unit_limit(20_000), c.pay(1)]);
    let VersionedMessage::Legacy(m) = legacy.message.clone() else { panic!("a legacy message") };
    let lookup = solana_sdk::message::v0::MessageAddressTableLookup {
        account_key: Pubkey::new_unique(),
        writable_indexes: vec![0],
        readonly_indexes: vec![],
    };
    let v0 = solana_sdk::message::v0::Message {
        header: m.header,
        account_keys: m.account_keys,
        recent_blockhash: m.recent_blockhash,
        instructions: m.instructions,
        address_table_lookups: vec![lookup],
    };
    let looked_up = VersionedTransaction { signatures: legacy.signatures, message: VersionedMessage::V0(v0) };
    assert!(check(&looked_up).unwrap_err().message.contains("lookup tables"));

    // Instructions: seven pass (shown above), an instruction naming a program past the keys
    // does not.
    let mut missing = c.tx(&[Cb::set_compute_unit_limit(20_000), c.pay(1)]);
    if let VersionedMessage::Legacy(m) = &mut missing.message {
        m.instructions[1].program_id_index = 200;
    }
    missing.signatures[1] = c.buyer.sign_message(&missing.message.serialize());
    assert!(check(&missing).unwrap_err().message.contains("missing program"));

    // TransferChecked's data is exactly tag, 8 amount bytes, decimals; and four accounts.
    assert_eq!(transfer_checked(&[TRANSFER_CHECKED, 1, 0, 0, 0, 0, 0, 0, 0, 6]), Some((1, 6)));
    assert_eq!(transfer_checked(&[TRANSFER_CHECKED, 1, 0, 0, 0, 0, 0, 0, 6]), None);
    assert_eq!(transfer_checked(&[TRANSFER_CHECKED, 1, 0, 0, 0, 0, 0, 0, 0, 0, 6]), None);
    assert_eq!(transfer_checked(&[TRANSFER_CHECKED + 1, 1, 0, 0, 0, 0, 0, 0, 0, 6]), None);
    let mut three_accounts = c.pay(1);
    three_accounts.accounts.truncate(3);
    let signed_by_buyer =
        Instruction::new_with_bytes(MEMO_V2, b"x", vec![AccountMeta::new_readonly(c.buyer.pubkey(), true)]);
    let refusal = check(&c.tx(&[three_accounts, signed_by_buyer])).unwrap_err();
    assert_eq!(refusal.reason, Reason::SvmNotTransferChecked, "{refusal}");

    // A memo asked for may come in the v1 Memo program too.
    let v1_memo = Instruction::new_with_bytes(MEMO_V1, b"order-9", vec![]);
    let with_v1 = c.tx(&[Cb::set_compute_unit_limit(20_000), c.pay(1), v1_memo]);
    check_sponsored_transfer(&with_v1, &sponsor, &policy, Some("order-9")).unwrap();
}

/// The reason a check refused with.
fn reason<T>(result: Result<T, ProofError>) -> Reason {
    crate::chains::refusal::refusal_reason(result).expect("a refusal, not a pass")
}

/// The accounts the chain holds, held to the transfer: the mint's program and decimals, the
/// seller's associated account, the source's mint, owner, state and balance.
#[test]
fn token_accounts_are_held_to_the_transfer() {
    let c = Case::new();
    let sponsor = c.sponsor.pubkey();
    let ata = associated_token_address(&c.seller, &c.mint, &TOKEN_PROGRAM);
    let t = TokenTransfer {
        program: TOKEN_PROGRAM,
        source: associated_token_address(&c.buyer.pubkey(), &c.mint, &TOKEN_PROGRAM),
        mint: c.mint,
        destination: ata,
        authority: c.buyer.pubkey(),
        amount: 1_000,
        decimals: 6,
    };

    // The mint: of the transfer's program, with the decimals it names.
    assert_eq!(mint_decimals(&t, Some(Ok((TOKEN_PROGRAM, 6)))).unwrap(), 6);
    assert_eq!(reason(mint_decimals(&t, Some(Ok((TOKEN_PROGRAM, 9))))), Reason::SvmNotTransferChecked);
    assert_eq!(reason(mint_decimals(&t, Some(Ok((TOKEN_2022_PROGRAM, 6))))), Reason::SvmNotTransferChecked);
    assert_eq!(reason(mint_decimals(&t, None)), Reason::SvmNotTransferChecked);
    let unsettleable = mint_decimals(&t, Some(Err("it charges a transfer fee".into())));
    assert_eq!(reason(unsettleable), Reason::InvalidPaymentRequirements);

    // The destination: the seller's associated account, of the mint, owned by the seller, not
    // frozen.
    let usable = Some((c.mint, c.seller, 0, false));
    paid_to(&t, (&c.seller, &ata), usable).unwrap();
    let elsewhere = TokenTransfer { destination: Pubkey::new_unique(), ..t };
    assert_eq!(reason(paid_to(&elsewhere, (&c.seller, &ata), usable)), Reason::SvmIncorrectAta);
    for (name, destination) in [
        ("absent", None),
        ("another mint", Some((Pubkey::new_unique(), c.seller, 0, false))),
        ("another owner", Some((c.mint, Pubkey::new_unique(), 0, false))),
        ("frozen", Some((c.mint, c.seller, 0, true))),
    ] {
        assert_eq!(reason(paid_to(&t, (&c.seller, &ata), destination)), Reason::SvmReceiverAtaNotFound, "{name}");
    }

    // The source: of the mint, not frozen, not the sponsor's, holding at least the amount.
    let buyer = c.buyer.pubkey();
    paid_from(&t, &sponsor, Some((c.mint, buyer, 1_000, false))).unwrap();
    assert_eq!(reason(paid_from(&t, &sponsor, Some((c.mint, buyer, 999, false)))), Reason::InsufficientFunds);
    assert_eq!(reason(paid_from(&t, &sponsor, None)), Reason::SvmSenderAtaNotFound);
    let other_mint = Some((Pubkey::new_unique(), buyer, 1_000, false));
    assert_eq!(reason(paid_from(&t, &sponsor, other_mint)), Reason::SvmSenderAtaNotFound);
    assert_eq!(reason(paid_from(&t, &sponsor, Some((c.mint, buyer, 1_000, true)))), Reason::SvmSenderAtaNotFound);
    let sponsors = Some((c.mint, sponsor, 1_000, false));
    assert_eq!(reason(paid_from(&t, &sponsor, sponsors)), Reason::SvmFeePayerTransferring);
}
