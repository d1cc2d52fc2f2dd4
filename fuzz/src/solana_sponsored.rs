//! A Token / Token-2022 `TransferChecked` the facilitator is asked to pay the fee of (x402
//! `exact` on Solana), through its checks that need no chain (`spl::check_sponsored_transfer`).
//! Inputs are messages the harness signs for every signer but the sponsor (see
//! [`crate::solana_native`]).

use solana_sdk::pubkey::Pubkey;
use solana_sdk::signer::Signer as _;
use tollgate_facilitator::chains::solana::spl::{self, SponsorPolicy};
use tollgate_facilitator::chains::solana::token::{TOKEN_2022_PROGRAM, TOKEN_PROGRAM};
use tollgate_facilitator::chains::solana::verify;

/// What this target feeds and what it asserts.
pub const ABOUT: &str = "Solana sponsored TransferChecked (exact): what passes holds exactly one TransferChecked of \
                         the amount its data says, never names the sponsor in an instruction, leaves the sponsor's \
                         signature empty, and stays within the sponsor's compute caps";

/// The memo an input's last byte may ask for (odd: asked).
pub const MEMO: &str = "order-42";

#[must_use]
/// The sponsor (fee payer) the harness checks transactions for.
pub fn sponsor() -> Pubkey {
    crate::solana_native::keys()[2].pubkey()
}

/// Runs one input; panics when a property breaks.
pub fn check(data: &[u8]) {
    let sponsor = sponsor();
    let Some(encoded) = crate::solana_native::transaction(data, Some(&sponsor)) else { return };
    let Ok(tx) = verify::decode(&encoded) else { return };
    crate::solana_native::decodes_to_its_bytes(&tx, &encoded);
    let memo = (data.last().is_some_and(|b| b % 2 == 1)).then_some(MEMO);
    let policy = SponsorPolicy::default();
    let Ok(sponsored) = spl::check_sponsored_transfer(&tx, &sponsor, &policy, memo) else { return };
    let message = &tx.message;
    let keys = message.static_account_keys();
    assert_eq!(keys.first(), Some(&sponsor), "the sponsor is not the fee payer");
    assert_eq!(tx.signatures[0], Default::default(), "the sponsor's slot was signed");
    crate::solana_native::all_signatures_verify(&tx, Some(0));
    assert!(message.instructions().len() <= spl::MAX_INSTRUCTIONS);
    let program = |index: u8| keys[usize::from(index)];
    let mut transfers = message
        .instructions()
        .iter()
        .filter(|ix| [TOKEN_PROGRAM, TOKEN_2022_PROGRAM].contains(&program(ix.program_id_index)));
    let ix = transfers.next().expect("a sponsored transfer holds a token instruction");
    assert!(transfers.next().is_none(), "two token instructions passed");
    assert_eq!(ix.data.len(), 10, "a token instruction that is no TransferChecked passed");
    assert_eq!(ix.data[0], tollgate_encoding::solana::TRANSFER_CHECKED);
    let amount = u64::from_le_bytes(ix.data[1..9].try_into().expect("eight bytes"));
    assert_eq!(sponsored.transfer.amount, amount, "the amount checked is not the instruction's");
    assert_eq!(sponsored.transfer.decimals, ix.data[9]);
    let account = |n: usize| keys[usize::from(ix.accounts[n])];
    assert_eq!(
        [
            sponsored.transfer.source,
            sponsored.transfer.mint,
            sponsored.transfer.destination,
            sponsored.transfer.authority
        ],
        [account(0), account(1), account(2), account(3)]
    );
    for ix in message.instructions() {
        assert!(
            ix.accounts.iter().all(|i| keys.get(usize::from(*i)) != Some(&sponsor)),
            "an instruction naming the sponsor passed"
        );
    }
    if let Some(memo) = memo {
        let memos = [verify::MEMO_V1, verify::MEMO_V2];
        assert!(
            message
                .instructions()
                .iter()
                .any(|ix| memos.contains(&program(ix.program_id_index)) && ix.data == memo.as_bytes()),
            "the memo asked for is missing, yet it passed"
        );
    }
    let mut budget = verify::ComputeBudget::default();
    for ix in message.instructions().iter().filter(|ix| program(ix.program_id_index) == verify::COMPUTE_BUDGET) {
        budget.note(&ix.data).expect("a passed transaction's compute-budget instructions read");
    }
    let others =
        message.instructions().iter().filter(|ix| program(ix.program_id_index) != verify::COMPUTE_BUDGET).count();
    assert!(budget.effective_limit(others) <= policy.max_compute_units, "more compute than sponsored passed");
    assert!(budget.unit_price.unwrap_or(0) <= policy.max_compute_unit_price, "a dearer unit price passed");
}
