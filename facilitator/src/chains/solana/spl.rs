//! x402 `exact` on Solana: an SPL `TransferChecked` the buyer signed, with someone else — the
//! facilitator, or in local mode the seller — as fee payer (the "sponsor").
//!
//! A sponsor signs whatever it is handed, so the transaction must be exactly a payment and
//! nothing that spends the sponsor's funds beyond the fee:
//!
//! * the sponsor is the fee payer (account 0), its signature slot is still empty, and every other
//!   signer's signature verifies; at most [`MAX_SIGNERS`] signers;
//! * the sponsor appears in no instruction's accounts (so it is neither the transfer's authority
//!   nor its source), and the source token account is not owned by it;
//! * instructions: compute-unit limit and price (each at most once, within the sponsor's caps),
//!   exactly one Token / Token-2022 `TransferChecked`, and Memo or Lighthouse assertions; at most
//!   [`MAX_INSTRUCTIONS`] in all; when the requirement's `extra.memo` names a memo, a Memo
//!   instruction carrying exactly it;
//! * no address lookup tables (what they name cannot be checked without resolving them);
//! * the destination is the associated token account of (`payTo`, mint), and exists; the source
//!   exists, holds the mint and enough of it; decimals match the mint.

use solana_sdk::hash::Hash;
use solana_sdk::pubkey::Pubkey;
use solana_sdk::signature::Signature;
use solana_sdk::transaction::VersionedTransaction;

use super::rpc::SolanaRpc;
use super::token::{TOKEN_2022_PROGRAM, TOKEN_PROGRAM, parse_mint};
use super::verify::{COMPUTE_BUDGET, ComputeBudget, MEMO_V1, MEMO_V2};
use crate::chains::memo::Facts;
use crate::chains::{ProofError, Reason, Refusal};

/// Lighthouse (assertion instructions that wallets such as Phantom append).
pub const LIGHTHOUSE: Pubkey = Pubkey::from_str_const("L2TExMFKdjpN9kozasaurPirfHy9P8sbXoAN1qA3S95");
use tollgate_encoding::solana::token_account;
/// Associated Token Account program.
pub use tollgate_encoding::solana::{ASSOCIATED_TOKEN_PROGRAM, associated_token_address};
/// Most instructions a sponsored transaction may hold: two compute-budget, the transfer, and
/// up to four Memo or Lighthouse (x402's current `exact` SVM rules; wallets such as Phantom add
/// Lighthouse assertions).
pub const MAX_INSTRUCTIONS: usize = 7;
/// Most signers (the sponsor included): the fee of each signature is the sponsor's.
pub const MAX_SIGNERS: u8 = 3;

/// Token program instruction tag of `TransferChecked`.
use tollgate_encoding::solana::TRANSFER_CHECKED;

/// What the sponsor is willing to pay for beyond the base fee.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SponsorPolicy {
    /// Most compute units the transaction may ask for.
    pub max_compute_units: u32,
    /// Highest compute-unit price, micro-lamports per unit.
    pub max_compute_unit_price: u64,
}

impl Default for SponsorPolicy {
    /// The configuration's defaults: 200,000 units at up to 5 lamports each (at most 0.001 SOL
    /// of priority fee).
    fn default() -> Self {
        Self {
            max_compute_units: crate::config::SPONSOR_MAX_COMPUTE_UNITS,
            max_compute_unit_price: crate::config::SPONSOR_MAX_COMPUTE_UNIT_PRICE,
        }
    }
}

/// The one `TransferChecked` of a sponsored transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenTransfer {
    /// Token or Token-2022.
    pub program: Pubkey,
    /// Source token account.
    pub source: Pubkey,
    /// Mint.
    pub mint: Pubkey,
    /// Destination token account.
    pub destination: Pubkey,
    /// The signer moving the tokens (owner or delegate of the source): the payer.
    pub authority: Pubkey,
    /// Base units.
    pub amount: u64,
    /// Decimals the buyer signed for.
    pub decimals: u8,
}

/// A sponsored transaction that passed the checks that need no chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SponsoredTransfer {
    /// The transfer.
    pub transfer: TokenTransfer,
    /// The blockhash it was signed against.
    pub blockhash: Hash,
}

fn refuse(reason: Reason, message: impl Into<String>) -> Refusal {
    Refusal::new(reason, message)
}

/// Reads a `TransferChecked` instruction's amount and decimals.
fn transfer_checked(data: &[u8]) -> Option<(u64, u8)> {
    match data {
        [TRANSFER_CHECKED, amount @ .., decimals] if amount.len() == 8 => {
            Some((u64::from_le_bytes(amount.try_into().ok()?), *decimals))
        }
        _ => None,
    }
}

/// Checks a transaction `sponsor` is asked to pay the fee of, without the chain; `memo` is the
/// memo the requirement asks for (its `extra.memo`), if any.
///
/// # Errors
/// [`Refusal`] naming the first rule broken.
pub fn check_sponsored_transfer(
    tx: &VersionedTransaction,
    sponsor: &Pubkey,
    policy: &SponsorPolicy,
    memo: Option<&str>,
) -> Result<SponsoredTransfer, Refusal> {
    check_signatures(tx, sponsor)?;
    let read = read_instructions(&tx.message, sponsor, memo)?;
    let transfer = read
        .transfer
        .ok_or_else(|| refuse(Reason::SvmNotTransferChecked, "the transaction holds no TransferChecked"))?;
    if let Some(memo) = memo.filter(|_| !read.memo_found) {
        return Err(refuse(
            Reason::SvmInstructions,
            format!("the requirement asks for the memo {memo:?}, which no Memo instruction carries"),
        ));
    }
    within_policy(&read.budget, read.others, policy)?;
    Ok(SponsoredTransfer { transfer, blockhash: *tx.message.recent_blockhash() })
}

/// No lookup tables; the sponsor first, as fee payer, its signature slot empty; at least the
/// payer's signature besides, at most [`MAX_SIGNERS`], each one verifying.
fn check_signatures(tx: &VersionedTransaction, sponsor: &Pubkey) -> Result<(), Refusal> {
    let message = &tx.message;
    if message.address_table_lookups().is_some_and(|l| !l.is_empty()) {
        return Err(refuse(Reason::SvmTransaction, "address lookup tables are not accepted in payment transactions"));
    }
    if message.static_account_keys().first() != Some(sponsor) {
        return Err(refuse(Reason::SvmTransaction, format!("the fee payer must be {sponsor}")));
    }
    let signers = message.header().num_required_signatures;
    if signers > MAX_SIGNERS {
        return Err(refuse(Reason::SvmTransaction, format!("at most {MAX_SIGNERS} signers are accepted")));
    }
    if signers < 2 {
        return Err(refuse(Reason::SvmTransaction, "the payer has not signed the transaction"));
    }
    if tx.signatures.first() != Some(&Signature::default()) {
        return Err(refuse(Reason::SvmTransaction, "the fee payer's signature slot must be empty"));
    }
    if tx.verify_with_results().iter().skip(1).any(|ok| !ok) {
        return Err(refuse(Reason::SvmTransaction, "a transaction signature does not verify"));
    }
    Ok(())
}

/// What a sponsored transaction's instructions do.
struct Read {
    budget: ComputeBudget,
    /// Its one `TransferChecked`.
    transfer: Option<TokenTransfer>,
    /// Instructions besides the compute budget's.
    others: usize,
    /// Whether a Memo instruction carries the memo asked for.
    memo_found: bool,
}

/// Reads each instruction: compute budget, one `TransferChecked` (not moving the sponsor's
/// funds), memos, Lighthouse assertions — nothing else, and never the sponsor among an
/// instruction's accounts.
fn read_instructions(
    message: &solana_sdk::message::VersionedMessage,
    sponsor: &Pubkey,
    memo: Option<&str>,
) -> Result<Read, Refusal> {
    let instructions = message.instructions();
    if instructions.len() > MAX_INSTRUCTIONS {
        return Err(refuse(
            Reason::SvmInstructionsLength,
            format!("a payment transaction holds at most {MAX_INSTRUCTIONS} instructions"),
        ));
    }
    let keys = message.static_account_keys();
    let key = |i: u8| keys.get(usize::from(i)).copied();
    let mut read = Read { budget: ComputeBudget::default(), transfer: None, others: 0, memo_found: false };
    for ix in instructions {
        let program = key(ix.program_id_index)
            .ok_or_else(|| refuse(Reason::SvmTransaction, "instruction names a missing program"))?;
        if program == COMPUTE_BUDGET {
            read.budget.note(&ix.data)?;
            continue;
        }
        read.others += 1;
        if program == TOKEN_PROGRAM || program == TOKEN_2022_PROGRAM {
            let accounts: Vec<Option<Pubkey>> = ix.accounts.iter().take(4).map(|i| key(*i)).collect();
            let next = token_transfer(program, &ix.data, &accounts, sponsor)?;
            if read.transfer.replace(next).is_some() {
                return Err(refuse(Reason::SvmInstructionsLength, "a payment transaction holds exactly one transfer"));
            }
        } else if program == MEMO_V2 || program == MEMO_V1 {
            read.memo_found |= memo.is_some_and(|m| m.as_bytes() == ix.data.as_slice());
        } else if program != LIGHTHOUSE {
            return Err(refuse(
                Reason::SvmInstructions,
                format!("program {program} is not accepted in a payment transaction"),
            ));
        }
        // Whatever the instruction, the sponsor must not be one of its accounts: a program could
        // otherwise debit it (it signs the transaction).
        if ix.accounts.iter().any(|i| key(*i) == Some(*sponsor)) {
            return Err(refuse(
                Reason::SvmFeePayerInAccounts,
                "the fee payer may not appear in an instruction's accounts",
            ));
        }
    }
    Ok(read)
}

/// A token program's instruction, which must be a `TransferChecked` of four named accounts
/// (`accounts`: its first four, `None` for an index past the keys) not moving the sponsor's funds.
fn token_transfer(
    program: Pubkey,
    data: &[u8],
    accounts: &[Option<Pubkey>],
    sponsor: &Pubkey,
) -> Result<TokenTransfer, Refusal> {
    let (amount, decimals) = transfer_checked(data).ok_or_else(|| {
        refuse(Reason::SvmNotTransferChecked, "the only token instruction accepted is TransferChecked")
    })?;
    let [Some(source), Some(mint), Some(destination), Some(authority)] = accounts else {
        return Err(refuse(
            Reason::SvmNotTransferChecked,
            "TransferChecked takes source, mint, destination and authority",
        ));
    };
    if authority == sponsor || source == sponsor {
        return Err(refuse(Reason::SvmFeePayerTransferring, "the fee payer may not move funds in a payment"));
    }
    Ok(TokenTransfer {
        program,
        source: *source,
        mint: *mint,
        destination: *destination,
        authority: *authority,
        amount,
        decimals,
    })
}

/// The compute units and unit price the sponsor pays for, within its policy.
fn within_policy(budget: &ComputeBudget, others: usize, policy: &SponsorPolicy) -> Result<(), Refusal> {
    let units = budget.effective_limit(others);
    if units > policy.max_compute_units {
        return Err(refuse(
            Reason::SvmComputeLimit,
            format!(
                "the transaction may use {units} compute units; at most {} are sponsored",
                policy.max_compute_units
            ),
        ));
    }
    if let Some(price) = budget.unit_price.filter(|p| *p > policy.max_compute_unit_price) {
        return Err(refuse(
            Reason::SvmComputePriceTooHigh,
            format!(
                "compute-unit price {price} micro-lamports is above the sponsored {}",
                policy.max_compute_unit_price
            ),
        ));
    }
    Ok(())
}

/// What a sponsored transfer pays, once its accounts are checked on chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenPayment {
    /// The mint's decimals.
    pub decimals: u8,
}

/// Checks a sponsored transfer against the chain: mint and decimals, destination = ATA(`pay_to`,
/// mint) and existing, source existing with the mint and balance, not owned by the sponsor.
///
/// # Errors
/// [`ProofError::Refused`] for a rule broken, [`ProofError::Chain`] when the chain cannot be read.
pub async fn check_token_accounts(
    rpc: &SolanaRpc,
    t: &TokenTransfer,
    (pay_to, sponsor): (&Pubkey, &Pubkey),
    mints: &Facts<Pubkey, (Pubkey, u8)>,
) -> Result<TokenPayment, ProofError> {
    let ata = associated_token_address(pay_to, &t.mint, &t.program);
    // The three accounts are read at once. A mint's program and decimals never change, nor does
    // the verdict on a mint without extensions whose settings change: such a mint read before is
    // not read again. A Token-2022 mint with a fee, a hook, a delegate or a default state is read
    // for each payment (its authority may change them).
    let known = mints.get(&t.mint);
    let read_mint = async {
        match known {
            Some(facts) => Ok(Some(Ok(facts))),
            None => Ok(rpc.account(&t.mint).await?.and_then(|(owner, data)| {
                parse_mint(&owner, &data).map(|mint| match mint.refusal() {
                    Some(why) => Err(why),
                    None => {
                        if mint.settled_for_good() {
                            mints.insert(t.mint, (owner, mint.decimals));
                        }
                        Ok((owner, mint.decimals))
                    }
                })
            })),
        }
    };
    let (mint, destination, source) = tokio::try_join!(read_mint, rpc.account(&ata), rpc.account(&t.source))?;
    let decimals = mint_decimals(t, mint)?;
    let destination = destination.and_then(|(owner, data)| token_account(&owner, &data));
    paid_to(t, (pay_to, &ata), destination)?;
    let source = source.and_then(|(owner, data)| token_account(&owner, &data));
    paid_from(t, sponsor, source)?;
    Ok(TokenPayment { decimals })
}

/// The mint's decimals, when it is a mint of the transfer's program this facilitator settles
/// and the transfer names its decimals.
fn mint_decimals(t: &TokenTransfer, mint: Option<Result<(Pubkey, u8), String>>) -> Result<u8, ProofError> {
    let decimals = match mint {
        Some(Ok((owner, decimals))) if owner == t.program => decimals,
        Some(Err(why)) => {
            return Err(refuse(
                Reason::InvalidPaymentRequirements,
                format!("this facilitator does not settle payments in {}: {why}", t.mint),
            )
            .into());
        }
        _ => {
            return Err(refuse(
                Reason::SvmNotTransferChecked,
                format!("{} is not a mint of the transfer's token program", t.mint),
            )
            .into());
        }
    };
    if decimals != t.decimals {
        return Err(refuse(
            Reason::SvmNotTransferChecked,
            format!("the transfer says {} decimals; the mint has {decimals}", t.decimals),
        )
        .into());
    }
    Ok(decimals)
}

/// The transfer pays `pay_to`'s associated token account `ata`, which exists, holds the mint and
/// is not frozen (`destination`: that account's mint, owner, balance and frozen flag).
fn paid_to(
    t: &TokenTransfer,
    (pay_to, ata): (&Pubkey, &Pubkey),
    destination: Option<(Pubkey, Pubkey, u64, bool)>,
) -> Result<(), ProofError> {
    if t.destination != *ata {
        return Err(refuse(
            Reason::SvmIncorrectAta,
            format!("the transfer pays {}, not {pay_to}'s associated token account {ata}", t.destination),
        )
        .into());
    }
    if !destination.is_some_and(|(m, owner, _, frozen)| m == t.mint && owner == *pay_to && !frozen) {
        return Err(refuse(
            Reason::SvmReceiverAtaNotFound,
            format!("{pay_to} has no usable token account for {} ({ata})", t.mint),
        )
        .into());
    }
    Ok(())
}

/// The transfer's source is a token account of the mint, not frozen, not the sponsor's, holding
/// the amount (`source`: its mint, owner, balance and frozen flag).
fn paid_from(
    t: &TokenTransfer,
    sponsor: &Pubkey,
    source: Option<(Pubkey, Pubkey, u64, bool)>,
) -> Result<(), ProofError> {
    let Some((source_mint, source_owner, balance, frozen)) = source else {
        return Err(
            refuse(Reason::SvmSenderAtaNotFound, format!("the source {} is not a token account", t.source)).into()
        );
    };
    if source_mint != t.mint || frozen {
        return Err(refuse(Reason::SvmSenderAtaNotFound, "the source account holds another mint or is frozen").into());
    }
    if source_owner == *sponsor {
        return Err(refuse(Reason::SvmFeePayerTransferring, "the source account belongs to the fee payer").into());
    }
    if balance < t.amount {
        return Err(refuse(
            Reason::InsufficientFunds,
            format!("the source holds {balance} base units; the transfer moves {}", t.amount),
        )
        .into());
    }
    Ok(())
}

#[cfg(test)]
#[path = "spl_tests.rs"]
pub(crate) mod tests;
