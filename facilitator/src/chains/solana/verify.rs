//! Checking `exact-native` Solana proofs without the chain: what a signed transfer may contain,
//! and which transfers a confirmed transaction made.
//!
//! A signed transaction offered as payment must be exactly what it claims: valid signatures,
//! one System transfer of at least the price to the seller, and nothing else but compute-budget
//! limit and price (each at most once) and memos. Anything more is refused before the facilitator
//! broadcasts it.

use solana_sdk::hash::Hash;
use solana_sdk::message::VersionedMessage;
use solana_sdk::pubkey::Pubkey;
use solana_sdk::transaction::VersionedTransaction;

use crate::chains::{Reason, Refusal};

/// SPL Memo program (v2).
pub const MEMO_V2: Pubkey = tollgate_encoding::solana::MEMO_PROGRAM;
/// SPL Memo program (v1).
pub const MEMO_V1: Pubkey = Pubkey::from_str_const("Memo1UhkJRfHyvLMcVucJwxXeuD728EqVDDwQDxFMNo");
/// System program.
pub const SYSTEM_PROGRAM: Pubkey = solana_system_interface::program::ID;
/// Compute budget program.
pub const COMPUTE_BUDGET: Pubkey = solana_compute_budget_interface::ID;

/// System program instruction tag of `Transfer`.
const SYSTEM_TRANSFER: u32 = 2;
/// Compute units a transaction may use when it sets no limit: 200,000 per instruction that is
/// not a compute-budget one, at most 1,400,000.
const DEFAULT_UNITS_PER_INSTRUCTION: u32 = 200_000;
/// The cluster's ceiling on compute units per transaction.
const MAX_UNITS_PER_TRANSACTION: u32 = 1_400_000;

/// Compute-budget instructions seen in a transaction: at most one unit limit and one unit price.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ComputeBudget {
    /// `SetComputeUnitLimit`, if present.
    pub unit_limit: Option<u32>,
    /// `SetComputeUnitPrice` in micro-lamports per unit, if present.
    pub unit_price: Option<u64>,
}

impl ComputeBudget {
    /// Records one compute-budget instruction.
    ///
    /// # Errors
    /// [`Refusal`] for other compute-budget instructions, malformed ones, and repeats.
    pub fn note(&mut self, data: &[u8]) -> Result<(), Refusal> {
        match data {
            [2, rest @ ..] => {
                let units = <[u8; 4]>::try_from(rest)
                    .map_err(|_| refuse(Reason::SvmComputeLimit, "malformed compute-unit limit instruction"))?;
                if self.unit_limit.replace(u32::from_le_bytes(units)).is_some() {
                    return Err(refuse(Reason::SvmComputeLimit, "the compute-unit limit may be set once"));
                }
            }
            [3, rest @ ..] => {
                let price = <[u8; 8]>::try_from(rest)
                    .map_err(|_| refuse(Reason::SvmComputePrice, "malformed compute-unit price instruction"))?;
                if self.unit_price.replace(u64::from_le_bytes(price)).is_some() {
                    return Err(refuse(Reason::SvmComputePrice, "the compute-unit price may be set once"));
                }
            }
            _ => {
                return Err(refuse(
                    Reason::SvmInstructions,
                    "only compute-unit limit and price compute-budget instructions are accepted",
                ));
            }
        }
        Ok(())
    }

    /// The units the transaction may consume, given how many other instructions it holds.
    #[must_use]
    pub fn effective_limit(&self, other_instructions: usize) -> u32 {
        self.unit_limit
            .unwrap_or_else(|| {
                u32::try_from(other_instructions).unwrap_or(u32::MAX).saturating_mul(DEFAULT_UNITS_PER_INSTRUCTION)
            })
            .min(MAX_UNITS_PER_TRANSACTION)
    }
}

/// Programs that check signatures the transaction carries in their data: the cluster charges
/// each of those signatures like one of the transaction's own.
const SIGNATURE_PRECOMPILES: [Pubkey; 3] =
    [solana_sdk_ids::ed25519_program::ID, solana_sdk_ids::secp256k1_program::ID, solana_sdk_ids::secp256r1_program::ID];

/// What a transaction's fee is made of, read from the transaction alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeeParts {
    /// Signatures the cluster charges for.
    pub signatures: u64,
    /// Lamports of priority fee: compute-unit price × limit, in micro-lamports, rounded up.
    pub priority: u64,
}

impl FeeParts {
    /// The parts of `message`'s fee, when the message alone decides them: `None` when it calls
    /// a signature precompile, sets a compute-unit price without a limit (the limit then
    /// depends on the cluster's rules for built-in programs), or holds a malformed
    /// compute-budget instruction.
    #[must_use]
    pub fn of(message: &VersionedMessage) -> Option<Self> {
        if !matches!(message, VersionedMessage::Legacy(_) | VersionedMessage::V0(_)) {
            return None;
        }
        let keys = message.static_account_keys();
        let mut budget = ComputeBudget::default();
        for ix in message.instructions() {
            let program = keys.get(usize::from(ix.program_id_index))?;
            if SIGNATURE_PRECOMPILES.contains(program) {
                return None;
            }
            if *program == COMPUTE_BUDGET {
                budget.note(&ix.data).ok()?;
            }
        }
        let priority = match (budget.unit_price, budget.unit_limit) {
            (None | Some(0), _) => 0,
            (Some(price), Some(limit)) => {
                let micro_lamports = u128::from(price) * u128::from(limit.min(MAX_UNITS_PER_TRANSACTION));
                u64::try_from(micro_lamports.div_ceil(MICRO_LAMPORTS_PER_LAMPORT)).ok()?
            }
            (Some(_), None) => return None,
        };
        Some(Self { signatures: u64::from(message.header().num_required_signatures), priority })
    }

    /// The fee, given the cluster's lamports per signature.
    #[must_use]
    pub fn fee(self, lamports_per_signature: u64) -> u64 {
        self.signatures.saturating_mul(lamports_per_signature).saturating_add(self.priority)
    }

    /// The cluster's lamports per signature, read back from the fee it charges for a message
    /// of these parts. Only a message without priority fee tells it: the cluster adds a priority
    /// fee with saturation, so a payer's huge price would make the rate read back whatever the
    /// payer likes.
    #[must_use]
    pub fn rate_in(self, fee: u64) -> Option<u64> {
        let rate = (self.priority == 0 && self.signatures > 0 && fee.is_multiple_of(self.signatures))
            .then(|| fee / self.signatures)?;
        (self.fee(rate) == fee && fee != u64::MAX).then_some(rate)
    }
}

/// Micro-lamports in a lamport (compute-unit prices are in micro-lamports).
const MICRO_LAMPORTS_PER_LAMPORT: u128 = 1_000_000;

fn refuse(reason: Reason, message: impl Into<String>) -> Refusal {
    Refusal::new(reason, message)
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
/// [`Refusal`] for bad base64 or bytes that are not a transaction.
pub fn decode(base64_tx: &str) -> Result<VersionedTransaction, Refusal> {
    use base64::Engine as _;
    let bad = |message: String| refuse(Reason::SvmTransaction, message);
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(base64_tx.trim())
        .map_err(|_| bad("transaction is not base64".into()))?;
    if bytes.len() > 1232 {
        return Err(bad("transaction is larger than a Solana packet (1232 bytes)".into()));
    }
    #[cfg(test)]
    crate::chains::decodes::count();
    let tx: VersionedTransaction = bincode::deserialize(&bytes).map_err(|_| bad("not a Solana transaction".into()))?;
    // Later versions carry fees and limits in the message itself, which no check here reads.
    if !matches!(tx.message, VersionedMessage::Legacy(_) | VersionedMessage::V0(_)) {
        return Err(bad("only legacy and v0 transactions are accepted".into()));
    }
    tx.sanitize().map_err(|e| bad(format!("malformed transaction: {e}")))?;
    if tx.message.address_table_lookups().is_some_and(|l| !l.is_empty()) {
        return Err(bad("address lookup tables are not accepted in payment transactions".into()));
    }
    Ok(tx)
}

/// Reads a System `Transfer` instruction's lamports.
fn transfer_lamports(data: &[u8]) -> Option<u64> {
    let tag = u32::from_le_bytes(data.get(..4)?.try_into().ok()?);
    (tag == SYSTEM_TRANSFER && data.len() == 12).then(|| u64::from_le_bytes(data[4..12].try_into().unwrap_or_default()))
}

/// Checks a signed transaction offered as an `exact-native` payment of at least `min_lamports`
/// to `pay_to`. Its payer pays the fees, so compute-budget values are not capped here.
///
/// # Errors
/// [`Refusal`] naming the first rule broken.
pub fn check_signed_transfer(
    tx: &VersionedTransaction,
    pay_to: &Pubkey,
    min_lamports: u64,
) -> Result<CheckedTransfer, Refusal> {
    if tx.signatures.is_empty() || tx.verify_with_results().iter().any(|ok| !ok) {
        return Err(refuse(Reason::SvmTransaction, "a transaction signature does not verify"));
    }
    let message = &tx.message;
    if message.address_table_lookups().is_some_and(|l| !l.is_empty()) {
        return Err(refuse(Reason::SvmTransaction, "address lookup tables are not accepted in payment transactions"));
    }
    let keys = message.static_account_keys();
    let key = |i: u8| keys.get(usize::from(i)).copied();
    let mut budget = ComputeBudget::default();
    let mut transfer = None;
    for ix in message.instructions() {
        let program = key(ix.program_id_index)
            .ok_or_else(|| refuse(Reason::SvmTransaction, "instruction names a missing program"))?;
        if program == COMPUTE_BUDGET {
            budget.note(&ix.data)?;
        } else if program == MEMO_V2 || program == MEMO_V1 {
            // A memo moves nothing.
        } else if program == SYSTEM_PROGRAM {
            let not_a_transfer = |m: &str| refuse(Reason::SvmNotATransfer, m);
            let lamports =
                transfer_lamports(&ix.data).ok_or_else(|| not_a_transfer("only System transfers are accepted"))?;
            let [from, to] = ix.accounts[..] else {
                return Err(not_a_transfer("a System transfer takes exactly two accounts"));
            };
            let (from_i, from, to) = (usize::from(from), key(from), key(to));
            let (Some(from), Some(to)) = (from, to) else {
                return Err(refuse(Reason::SvmTransaction, "a transfer names a missing account"));
            };
            if !message.is_signer(from_i) {
                return Err(refuse(Reason::SvmTransaction, "the transfer's source does not sign the transaction"));
            }
            if transfer.replace(NativeTransfer { from, to, lamports }).is_some() {
                return Err(refuse(Reason::SvmInstructionsLength, "a payment transaction holds exactly one transfer"));
            }
        } else {
            return Err(refuse(
                Reason::SvmInstructions,
                format!("program {program} is not accepted in a payment transaction"),
            ));
        }
    }
    let transfer = transfer.ok_or_else(|| refuse(Reason::SvmNotATransfer, "the transaction holds no transfer"))?;
    if transfer.to != *pay_to {
        return Err(refuse(
            Reason::NativeRecipientMismatch,
            format!("the transfer pays {}, not {pay_to}", transfer.to),
        ));
    }
    if transfer.lamports < min_lamports {
        return Err(refuse(
            Reason::SvmAmountMismatch,
            format!("the transfer pays {} lamports, less than the {min_lamports} expected", transfer.lamports),
        ));
    }
    let fee_payer = *keys.first().ok_or_else(|| refuse(Reason::SvmTransaction, "no fee payer"))?;
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
                "set once",
            ),
        ];
        for (name, tx, why) in cases {
            let err = check_signed_transfer(&tx, &seller, 10_000_000).unwrap_err();
            assert!(err.message.contains(why), "{name}: {err}");
        }
        // A tampered amount breaks the signature.
        let mut tampered = payment(&payer, &seller, 10_000_000, None);
        if let VersionedMessage::Legacy(m) = &mut tampered.message {
            m.instructions[0].data[4] ^= 1;
        }
        assert!(check_signed_transfer(&tampered, &seller, 1).unwrap_err().message.contains("signature"));
    }

    /// A v1 message carries its priority fee in its own config, which no check here reads:
    /// refused before anything else looks at it.
    #[test]
    fn a_v1_transaction_is_refused() {
        use base64::Engine as _;
        use solana_sdk::message::v1;
        let payer = Keypair::new();
        let pay = solana_system_interface::instruction::transfer(&payer.pubkey(), &Pubkey::new_unique(), 1);
        let config = v1::TransactionConfig { priority_fee: Some(1_000_000_000), ..Default::default() };
        let message =
            v1::Message::try_compile_with_config(&payer.pubkey(), &[pay], Hash::new_unique(), config).unwrap();
        let message = VersionedMessage::V1(message);
        assert_eq!(FeeParts::of(&message), None);
        let tx = VersionedTransaction::try_new(message, &[&payer]).unwrap();
        let encoded = base64::engine::general_purpose::STANDARD.encode(bincode::serialize(&tx).unwrap());
        let refusal = decode(&encoded).unwrap_err();
        assert!(refusal.message.contains("only legacy and v0"), "{refusal}");
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

    #[test]
    fn a_fee_is_derived_only_when_the_message_alone_decides_it() {
        use solana_compute_budget_interface::ComputeBudgetInstruction as Budget;
        let payer = Keypair::new();
        let pay = solana_system_interface::instruction::transfer(&payer.pubkey(), &Pubkey::new_unique(), 1);
        let parts = |instructions: &[Instruction]| {
            let message = Message::new_with_blockhash(instructions, Some(&payer.pubkey()), &Hash::new_unique());
            FeeParts::of(&VersionedMessage::Legacy(message))
        };
        let priced = parts(&[Budget::set_compute_unit_limit(3), Budget::set_compute_unit_price(333_334), pay.clone()]);
        assert_eq!(priced, Some(FeeParts { signatures: 1, priority: 2 }), "1,000,002 micro-lamports round up");
        assert_eq!(priced.unwrap().fee(5_000), 5_002);
        assert_eq!(priced.unwrap().rate_in(5_002), None, "only a fee without priority part tells the rate");
        assert_eq!(FeeParts { signatures: 2, priority: 0 }.rate_in(10_000), Some(5_000));
        assert_eq!(FeeParts { signatures: 2, priority: 0 }.rate_in(10_001), None);
        // A price so high that the cluster's sum saturates: what it answers says nothing of the rate.
        let saturated =
            parts(&[Budget::set_compute_unit_limit(1_000_000), Budget::set_compute_unit_price(u64::MAX), pay.clone()]);
        assert_eq!(saturated.map(|p| p.priority), Some(u64::MAX));
        assert_eq!(saturated.unwrap().rate_in(u64::MAX), None);
        assert_eq!(FeeParts { signatures: 1, priority: 0 }.rate_in(u64::MAX), None);
        assert_eq!(parts(&[Budget::set_compute_unit_price(1), pay.clone()]), None, "the cluster picks the limit");
        let precompile = Instruction::new_with_bytes(solana_sdk_ids::ed25519_program::ID, &[0], vec![]);
        assert_eq!(parts(&[precompile, pay.clone()]), None, "its signatures are charged too");
        let malformed = Instruction::new_with_bytes(COMPUTE_BUDGET, &[2, 1], vec![]);
        assert_eq!(parts(&[malformed, pay]), None);
    }
}
