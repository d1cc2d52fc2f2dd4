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
