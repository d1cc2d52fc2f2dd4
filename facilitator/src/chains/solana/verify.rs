//! Checking `exact-native` Solana proofs without the chain: what a signed transfer may contain,
//! and which transfers a confirmed transaction made.
//!
//! A signed transaction offered as payment must be exactly what it claims: valid signatures,
//! one System transfer of at least the price to the seller, and nothing else but compute-budget
//! limit and price (each at most once) and memos. Anything more is refused before the facilitator
//! broadcasts it.

use solana_sdk::hash::Hash;
use solana_sdk::pubkey::Pubkey;
use solana_sdk::transaction::VersionedTransaction;

/// SPL Memo program (v2).
pub const MEMO_V2: Pubkey = Pubkey::from_str_const("MemoSq4gqABAXKb96qnH8TysNcWxMyWCqXgDLGmfcHr");
/// SPL Memo program (v1).
pub const MEMO_V1: Pubkey = Pubkey::from_str_const("Memo1UhkJRfHyvLMcVucJwxXeuD728EqVDDwQDxFMNo");
/// System program.
pub const SYSTEM_PROGRAM: Pubkey = solana_system_interface::program::ID;
/// Compute budget program.
pub const COMPUTE_BUDGET: Pubkey = solana_compute_budget_interface::ID;

/// System program instruction tag of `Transfer`.
const SYSTEM_TRANSFER: u32 = 2;

/// Why a proof transaction is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ProofError(pub String);

fn refuse(reason: impl Into<String>) -> ProofError {
    ProofError(reason.into())
}

/// A native transfer inside a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NativeTransfer {
    /// Source (a signer).
    pub from: Pubkey,
    /// Destination.
    pub to: Pubkey,
    /// Lamports.
    pub lamports: u64,
}

/// What a checked proof transaction pays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckedTransfer {
    /// The one transfer.
    pub transfer: NativeTransfer,
    /// The fee payer (first account).
    pub fee_payer: Pubkey,
    /// The blockhash it was signed against.
    pub blockhash: Hash,
}

/// Decodes a base64 transaction as carried in an `exact-native` payload.
///
/// # Errors
/// [`ProofError`] for bad base64 or bytes that are not a transaction.
pub fn decode(base64_tx: &str) -> Result<VersionedTransaction, ProofError> {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(base64_tx.trim())
        .map_err(|_| refuse("transaction is not base64"))?;
    if bytes.len() > 1232 {
        return Err(refuse("transaction is larger than a Solana packet (1232 bytes)"));
    }
    let tx: VersionedTransaction = bincode::deserialize(&bytes).map_err(|_| refuse("not a Solana transaction"))?;
    tx.sanitize().map_err(|e| refuse(format!("malformed transaction: {e}")))?;
    Ok(tx)
}

/// Reads a System `Transfer` instruction's lamports.
fn transfer_lamports(data: &[u8]) -> Option<u64> {
    let tag = u32::from_le_bytes(data.get(..4)?.try_into().ok()?);
    (tag == SYSTEM_TRANSFER && data.len() == 12).then(|| u64::from_le_bytes(data[4..12].try_into().unwrap_or_default()))
}

/// Checks a signed transaction offered as an `exact-native` payment of at least `min_lamports`
/// to `pay_to`.
///
/// # Errors
/// [`ProofError`] naming the first rule broken.
pub fn check_signed_transfer(
    tx: &VersionedTransaction,
    pay_to: &Pubkey,
    min_lamports: u64,
) -> Result<CheckedTransfer, ProofError> {
    if tx.verify_with_results().iter().any(|ok| !ok) || tx.signatures.is_empty() {
        return Err(refuse("a transaction signature does not verify"));
    }
    let message = &tx.message;
    if message.address_table_lookups().is_some_and(|l| !l.is_empty()) {
        return Err(refuse("address lookup tables are not accepted in payment transactions"));
    }
    let keys = message.static_account_keys();
    let key = |i: u8| keys.get(usize::from(i)).copied();
    let (mut limit_seen, mut price_seen) = (false, false);
    let mut transfer = None;
    for ix in message.instructions() {
        let program = key(ix.program_id_index).ok_or_else(|| refuse("instruction names a missing program"))?;
        if program == COMPUTE_BUDGET {
            let seen = match ix.data.first() {
                Some(2) => &mut limit_seen,
                Some(3) => &mut price_seen,
                _ => return Err(refuse("only compute-unit limit and price compute-budget instructions are accepted")),
            };
            if std::mem::replace(seen, true) {
                return Err(refuse("compute-budget instructions may appear once each"));
            }
        } else if program == MEMO_V2 || program == MEMO_V1 {
            // A memo moves nothing.
        } else if program == SYSTEM_PROGRAM {
            let lamports = transfer_lamports(&ix.data).ok_or_else(|| refuse("only System transfers are accepted"))?;
            let [from, to] = ix.accounts[..] else {
                return Err(refuse("a System transfer takes exactly two accounts"));
            };
            let (from_i, from, to) = (usize::from(from), key(from), key(to));
            let (Some(from), Some(to)) = (from, to) else { return Err(refuse("a transfer names a missing account")) };
            if !message.is_signer(from_i) {
                return Err(refuse("the transfer's source does not sign the transaction"));
            }
            if transfer.replace(NativeTransfer { from, to, lamports }).is_some() {
                return Err(refuse("a payment transaction holds exactly one transfer"));
            }
        } else {
            return Err(refuse(format!("program {program} is not accepted in a payment transaction")));
        }
    }
    let transfer = transfer.ok_or_else(|| refuse("the transaction holds no transfer"))?;
    if transfer.to != *pay_to {
        return Err(refuse(format!("the transfer pays {}, not {pay_to}", transfer.to)));
    }
    if transfer.lamports < min_lamports {
        return Err(refuse(format!(
            "the transfer pays {} lamports, less than the {min_lamports} expected",
            transfer.lamports
        )));
    }
    let fee_payer = *keys.first().ok_or_else(|| refuse("no fee payer"))?;
    Ok(CheckedTransfer { transfer, fee_payer, blockhash: *message.recent_blockhash() })
}

/// Lamports a (confirmed) transaction moved from `from` to `to` through System transfers.
#[must_use]
pub fn transferred(tx: &VersionedTransaction, from: &Pubkey, to: &Pubkey) -> u64 {
    let keys = tx.message.static_account_keys();
    tx.message
        .instructions()
        .iter()
        .filter(|ix| keys.get(usize::from(ix.program_id_index)) == Some(&SYSTEM_PROGRAM))
        .filter_map(|ix| {
            let lamports = transfer_lamports(&ix.data)?;
            let [a, b] = ix.accounts[..] else { return None };
            (keys.get(usize::from(a)) == Some(from) && keys.get(usize::from(b)) == Some(to)).then_some(lamports)
        })
        .fold(0u64, u64::saturating_add)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chains::solana::build::Transfer;
    use solana_sdk::instruction::{AccountMeta, Instruction};
    use solana_sdk::message::{Message, VersionedMessage};
    use solana_sdk::signature::Keypair;
    use solana_sdk::signer::Signer as _;
    use solana_sdk::transaction::Transaction;

    fn signed(payer: &Keypair, instructions: &[Instruction]) -> VersionedTransaction {
        let message = Message::new_with_blockhash(instructions, Some(&payer.pubkey()), &Hash::new_unique());
        VersionedTransaction::from(Transaction::new(&[payer], message, Hash::default()))
    }

    fn payment(payer: &Keypair, to: &Pubkey, lamports: u64, fee: Option<u64>) -> VersionedTransaction {
        let message =
            Transfer { from: payer.pubkey(), to: *to, lamports, priority_fee: fee }.message(&Hash::new_unique());
        let blockhash = message.recent_blockhash;
        VersionedTransaction::from(Transaction::new(&[payer], message, blockhash))
    }

    #[test]
    fn a_plain_payment_passes() {
        let payer = Keypair::new();
        let seller = Pubkey::new_unique();
        let tx = payment(&payer, &seller, 10_000_000, Some(5_000));
        let checked = check_signed_transfer(&tx, &seller, 10_000_000).unwrap();
        assert_eq!(checked.transfer, NativeTransfer { from: payer.pubkey(), to: seller, lamports: 10_000_000 });
        assert_eq!(checked.fee_payer, payer.pubkey());
        assert_eq!(transferred(&tx, &payer.pubkey(), &seller), 10_000_000);
        let memo = Instruction::new_with_bytes(MEMO_V2, b"order 42", vec![]);
        let with_memo = signed(
            &payer,
            &[memo, solana_system_interface::instruction::transfer(&payer.pubkey(), &seller, 10_000_000)],
        );
        assert!(check_signed_transfer(&with_memo, &seller, 10_000_000).is_ok());
    }

    #[test]
    fn hostile_or_wrong_transactions_are_refused() {
        let payer = Keypair::new();
        let seller = Pubkey::new_unique();
        let transfer = |to: &Pubkey, l: u64| solana_system_interface::instruction::transfer(&payer.pubkey(), to, l);
        let cases: Vec<(&str, VersionedTransaction, &str)> = vec![
            ("underpays", payment(&payer, &seller, 9_999_999, None), "less than"),
            ("wrong recipient", payment(&payer, &Pubkey::new_unique(), 10_000_000, None), "not"),
            (
                "two transfers",
                signed(&payer, &[transfer(&seller, 5_000_000), transfer(&seller, 5_000_000)]),
                "exactly one",
            ),
            ("no transfer", signed(&payer, &[Instruction::new_with_bytes(MEMO_V2, b"hi", vec![])]), "no transfer"),
            (
                "other program",
                signed(
                    &payer,
                    &[
                        transfer(&seller, 10_000_000),
                        Instruction::new_with_bytes(
                            Pubkey::new_unique(),
                            &[1],
                            vec![AccountMeta::new(payer.pubkey(), true)],
                        ),
                    ],
                ),
                "not accepted",
            ),
            (
                "other system instruction",
                signed(
                    &payer,
                    &[
                        solana_system_interface::instruction::assign(&payer.pubkey(), &Pubkey::new_unique()),
                        transfer(&seller, 10_000_000),
                    ],
                ),
                "only System transfers",
            ),
            (
                "duplicate compute price",
                signed(
                    &payer,
                    &[
                        solana_compute_budget_interface::ComputeBudgetInstruction::set_compute_unit_price(1),
                        solana_compute_budget_interface::ComputeBudgetInstruction::set_compute_unit_price(2),
                        transfer(&seller, 10_000_000),
                    ],
                ),
                "once each",
            ),
        ];
        for (name, tx, why) in cases {
            let err = check_signed_transfer(&tx, &seller, 10_000_000).unwrap_err();
            assert!(err.0.contains(why), "{name}: {err}");
        }
        // A tampered amount breaks the signature.
        let mut tampered = payment(&payer, &seller, 10_000_000, None);
        if let VersionedMessage::Legacy(m) = &mut tampered.message {
            m.instructions[0].data[4] ^= 1;
        }
        assert!(check_signed_transfer(&tampered, &seller, 1).unwrap_err().0.contains("signature"));
    }

    #[test]
    fn decoding_is_bounded_and_strict() {
        use base64::Engine as _;
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        assert!(decode("%%%").is_err());
        assert!(decode(&b64(&[0u8; 2000])).is_err());
        assert!(decode(&b64(&[1, 2, 3])).is_err());
        let payer = Keypair::new();
        let tx = payment(&payer, &Pubkey::new_unique(), 1, None);
        assert_eq!(decode(&b64(&bincode::serialize(&tx).unwrap())).unwrap(), tx);
    }
}
