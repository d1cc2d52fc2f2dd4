//! The ledger against the real runtime: what lands, what is refused, and what its records say.

use solana_sdk::account::Account;
use solana_sdk::hash::Hash;
use solana_sdk::message::{Message, VersionedMessage};
use solana_sdk::pubkey::Pubkey;
use solana_sdk::signature::Keypair;
use solana_sdk::signer::Signer as _;
use solana_sdk::transaction::{Transaction, TransactionError, VersionedTransaction};
use tollgate_encoding::solana::Transfer;

use super::{Ledger, MAX_PROCESSING_AGE, Preflight};
use crate::chains::solana::token::TOKEN_PROGRAM;

const SOL: u64 = 1_000_000_000;

fn funded(ledger: &mut Ledger, lamports: u64) -> Keypair {
    let key = Keypair::new();
    ledger.airdrop(&key.pubkey(), lamports).unwrap();
    key
}

fn transfer(
    from: &Keypair,
    to: &Pubkey,
    lamports: u64,
    priority_fee: Option<u64>,
    blockhash: Hash,
) -> VersionedTransaction {
    let message = Transfer { from: from.pubkey(), to: *to, lamports, priority_fee }.message(&blockhash);
    Transaction::new(&[from], message, blockhash).into()
}

#[test]
fn a_transfer_lands_with_its_balances_and_fee() {
    let mut ledger = Ledger::new().unwrap();
    let payer = funded(&mut ledger, SOL);
    let to = Pubkey::new_unique();
    let tx = transfer(&payer, &to, 3_000_000, None, ledger.latest_blockhash().0);
    let signature = ledger.send(tx, Preflight::Check).unwrap();
    let landed = ledger.landed(&signature).unwrap();
    assert_eq!((landed.err.as_ref(), landed.fee, landed.slot), (None, 5_000, ledger.height()));
    assert_eq!(landed.lamports.0[..2], [SOL, 0]);
    assert_eq!(landed.lamports.1[..2], [SOL - 3_000_000 - 5_000, 3_000_000]);
    assert_eq!(ledger.account(&to).unwrap().lamports, 3_000_000);
}

#[test]
fn the_quoted_fee_is_the_fee_charged_priority_included() {
    let mut ledger = Ledger::new().unwrap();
    let payer = funded(&mut ledger, SOL);
    let blockhash = ledger.latest_blockhash().0;
    let tx = transfer(&payer, &Pubkey::new_unique(), 1_000_000, Some(7), blockhash);
    let quoted = ledger.fee_for(tx.message.clone()).unwrap();
    assert_eq!(quoted, 5_007);
    let signature = ledger.send(tx, Preflight::Check).unwrap();
    assert_eq!(ledger.landed(&signature).unwrap().fee, quoted);
    // A message signed against a blockhash the cluster no longer knows has no fee.
    let stale = Transfer { from: payer.pubkey(), to: Pubkey::new_unique(), lamports: 1, priority_fee: None };
    assert_eq!(ledger.fee_for(VersionedMessage::Legacy(stale.message(&Hash::new_unique()))), None);
}

#[test]
fn a_blockhash_is_usable_for_150_blocks_and_no_longer() {
    let mut ledger = Ledger::new().unwrap();
    let payer = funded(&mut ledger, SOL);
    let (old, last_valid) = ledger.latest_blockhash();
    assert_eq!(last_valid, ledger.height() + MAX_PROCESSING_AGE);
    for _ in 0..MAX_PROCESSING_AGE {
        ledger.produce_block(0);
    }
    assert_eq!(ledger.height(), last_valid);
    assert!(ledger.blockhash_valid(&old));
    ledger.send(transfer(&payer, &Pubkey::new_unique(), 1_000_000, None, old), Preflight::Check).unwrap();
    assert!(ledger.blockhash_valid(&old), "a landed transaction rotates the blockhash, not the block");
    ledger.produce_block(0);
    assert!(!ledger.blockhash_valid(&old));
    let late =
        ledger.send(transfer(&payer, &Pubkey::new_unique(), 2_000_000, None, old), Preflight::Check).unwrap_err();
    assert_eq!(late.err, Some(TransactionError::BlockhashNotFound));
    let unknown = transfer(&payer, &Pubkey::new_unique(), 2, None, Hash::new_unique());
    assert_eq!(ledger.send(unknown, Preflight::Skip).unwrap_err().err, Some(TransactionError::BlockhashNotFound));
}

#[test]
fn a_transaction_lands_once() {
    let mut ledger = Ledger::new().unwrap();
    let payer = funded(&mut ledger, SOL);
    let to = Pubkey::new_unique();
    let tx = transfer(&payer, &to, 1_000_000, None, ledger.latest_blockhash().0);
    ledger.send(tx.clone(), Preflight::Check).unwrap();
    ledger.produce_block(0);
    for preflight in [Preflight::Check, Preflight::Skip] {
        assert_eq!(ledger.send(tx.clone(), preflight).unwrap_err().err, Some(TransactionError::AlreadyProcessed));
    }
    assert_eq!(ledger.simulate(tx, true, false).err, Some(TransactionError::AlreadyProcessed));
    assert_eq!(ledger.account(&to).unwrap().lamports, 1_000_000, "paid once");
}

#[test]
fn preflight_refuses_a_failing_transaction_and_skipping_it_lands_the_failure() {
    let mut ledger = Ledger::new().unwrap();
    let payer = funded(&mut ledger, SOL);
    let too_much = transfer(&payer, &Pubkey::new_unique(), 2 * SOL, None, ledger.latest_blockhash().0);
    let refused = ledger.send(too_much.clone(), Preflight::Check).unwrap_err();
    assert!(matches!(refused.err, Some(TransactionError::InstructionError(0, _))), "{refused:?}");
    assert!(ledger.landed(&too_much.signatures[0]).is_none());
    assert_eq!(ledger.account(&payer.pubkey()).unwrap().lamports, SOL, "nothing charged");

    let signature = ledger.send(too_much, Preflight::Skip).unwrap();
    let landed = ledger.landed(&signature).unwrap();
    assert!(landed.err.is_some());
    assert_eq!(landed.lamports.1[0], SOL - 5_000, "the fee is charged, nothing moved");
    assert_eq!(ledger.account(&payer.pubkey()).unwrap().lamports, SOL - 5_000);

    // A fee payer that cannot pay: refused whatever the preflight, nothing lands.
    let broke = Keypair::new();
    let tx = transfer(&broke, &Pubkey::new_unique(), 1, None, ledger.latest_blockhash().0);
    assert!(ledger.send(tx.clone(), Preflight::Skip).is_err());
    assert!(ledger.landed(&tx.signatures[0]).is_none());
}

#[test]
fn a_forged_signature_is_refused_and_an_unsigned_transaction_only_simulates() {
    let mut ledger = Ledger::new().unwrap();
    let payer = funded(&mut ledger, SOL);
    let mut tx = transfer(&payer, &Pubkey::new_unique(), 1_000_000, None, ledger.latest_blockhash().0);
    tx.signatures[0] = solana_sdk::signature::Signature::default();
    assert_eq!(ledger.simulate(tx.clone(), true, false).err, Some(TransactionError::SignatureFailure));
    assert_eq!(ledger.simulate(tx.clone(), false, false).err, None, "without signature checks it would succeed");
    assert_eq!(ledger.send(tx, Preflight::Skip).unwrap_err().err, Some(TransactionError::SignatureFailure));
    let stale = transfer(&payer, &Pubkey::new_unique(), 1_000_000, None, Hash::new_unique());
    assert_eq!(ledger.simulate(stale.clone(), false, false).err, Some(TransactionError::BlockhashNotFound));
    assert_eq!(ledger.simulate(stale, false, true).err, None, "with the blockhash replaced");
}

#[test]
fn equal_airdrops_are_two_transactions() {
    let mut ledger = Ledger::new().unwrap();
    let to = Pubkey::new_unique();
    let first = ledger.airdrop(&to, SOL).unwrap();
    let second = ledger.airdrop(&to, SOL).unwrap();
    assert_ne!(first, second);
    assert_eq!(ledger.account(&to).unwrap().lamports, 2 * SOL);
}

/// Token balances are read from the accounts the transaction names, with the mint's decimals.
#[test]
fn a_token_transfer_records_token_balances() {
    let mut ledger = Ledger::new().unwrap();
    let owner = funded(&mut ledger, SOL);
    let payee = Pubkey::new_unique();
    let (mint, source, destination) = (Pubkey::new_unique(), Pubkey::new_unique(), Pubkey::new_unique());
    let rent = ledger.rent_exempt_minimum(165);
    let token = |data: Vec<u8>| Account { lamports: rent, data, owner: TOKEN_PROGRAM, ..Account::default() };
    ledger.set_account(mint, token(mint_data(6))).unwrap();
    ledger.set_account(source, token(token_account_data(&mint, &owner.pubkey(), 5_000_000))).unwrap();
    ledger.set_account(destination, token(token_account_data(&mint, &payee, 0))).unwrap();
    let pay = tollgate_encoding::solana::transfer_checked(
        &TOKEN_PROGRAM,
        (&source, &mint, &destination),
        &owner.pubkey(),
        (1_250_000, 6),
    );
    let blockhash = ledger.latest_blockhash().0;
    let tx = Transaction::new(&[&owner], Message::new(&[pay], Some(&owner.pubkey())), blockhash);
    let signature = ledger.send(tx.into(), Preflight::Check).unwrap();
    let landed = ledger.landed(&signature).unwrap();
    let amounts = |list: &[super::Holding]| list.iter().map(|h| (h.owner, h.amount, h.decimals)).collect::<Vec<_>>();
    assert_eq!(amounts(&landed.tokens.0), [(owner.pubkey(), 5_000_000, 6), (payee, 0, 6)]);
    assert_eq!(amounts(&landed.tokens.1), [(owner.pubkey(), 3_750_000, 6), (payee, 1_250_000, 6)]);
}

fn mint_data(decimals: u8) -> Vec<u8> {
    let mut d = vec![0; 82];
    d[44] = decimals;
    d[45] = 1;
    d
}

fn token_account_data(mint: &Pubkey, owner: &Pubkey, amount: u64) -> Vec<u8> {
    let mut d = vec![0; 165];
    d[..32].copy_from_slice(mint.as_ref());
    d[32..64].copy_from_slice(owner.as_ref());
    d[64..72].copy_from_slice(&amount.to_le_bytes());
    d[108] = 1;
    d
}

/// A cluster keys what it has processed by message too: the same message under another
/// signature (a signer can sign it again with another nonce) is the same transaction.
#[test]
fn a_message_lands_once_whatever_signature_it_carries() {
    let mut ledger = Ledger::new().unwrap();
    let payer = funded(&mut ledger, SOL);
    let to = Pubkey::new_unique();
    let tx = transfer(&payer, &to, 1_000_000, None, ledger.latest_blockhash().0);
    ledger.send(tx.clone(), Preflight::Check).unwrap();
    // The repeat is refused before its signature is even checked: the message decides.
    let mut resigned = tx;
    resigned.signatures[0] = solana_sdk::signature::Signature::from([9; 64]);
    for preflight in [Preflight::Check, Preflight::Skip] {
        assert_eq!(ledger.send(resigned.clone(), preflight).unwrap_err().err, Some(TransactionError::AlreadyProcessed));
    }
    assert_eq!(ledger.account(&to).unwrap().lamports, 1_000_000);
}

#[test]
fn blockhashes_and_genesis_cannot_be_predicted_or_carried_over() {
    let (mut first, second) = (Ledger::new().unwrap(), Ledger::new().unwrap());
    assert_ne!(first.genesis(), second.genesis(), "each start is another cluster");
    assert!(!second.blockhash_valid(&first.latest_blockhash().0));
    let before = first.latest_blockhash().0;
    first.produce_block(0);
    assert_ne!(first.latest_blockhash().0, before);
}

#[test]
fn the_runtimes_own_accounts_cannot_be_written() {
    let mut ledger = Ledger::new().unwrap();
    let any =
        Account { lamports: 0, data: vec![0; 40], owner: solana_sdk_ids::system_program::ID, ..Account::default() };
    for runtime_owned in [
        solana_sdk_ids::sysvar::clock::ID,
        solana_sdk_ids::sysvar::rent::ID,
        TOKEN_PROGRAM,
        solana_sdk_ids::system_program::ID,
    ] {
        assert!(ledger.set_account(runtime_owned, any.clone()).is_err(), "{runtime_owned}");
    }
    let program = Account { executable: true, ..any.clone() };
    assert!(ledger.set_account(Pubkey::new_unique(), program).is_err());
    assert!(ledger.set_account(Pubkey::new_unique(), Account { lamports: 1_000_000, ..any }).is_ok());
    // The ledger still runs.
    let payer = funded(&mut ledger, SOL);
    ledger
        .send(transfer(&payer, &Pubkey::new_unique(), 1_000_000, None, ledger.latest_blockhash().0), Preflight::Check)
        .unwrap();
}

#[test]
fn an_airdrop_is_capped() {
    let mut ledger = Ledger::new().unwrap();
    assert!(ledger.airdrop(&Pubkey::new_unique(), super::MAX_AIRDROP + 1).is_err());
    assert!(ledger.airdrop(&Pubkey::new_unique(), super::MAX_AIRDROP).is_ok());
}
