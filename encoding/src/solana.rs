//! Solana: the programs a payment names, the SPL `TransferChecked` an x402 `exact` payment
//! makes, and the native SOL transfer an `exact-native` one makes.

use solana_compute_budget_interface::ComputeBudgetInstruction;
use solana_sdk::hash::Hash;
use solana_sdk::instruction::{AccountMeta, Instruction};
use solana_sdk::message::Message;
use solana_sdk::pubkey::Pubkey;

/// SPL Token program.
pub const TOKEN_PROGRAM: Pubkey = Pubkey::from_str_const("TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA");
/// SPL Token-2022 program.
pub const TOKEN_2022_PROGRAM: Pubkey = Pubkey::from_str_const("TokenzQdBNbLqP5VEhdkAS6EPFLC1PHnBqCXEpPxuEb");
/// Associated Token Account program.
pub const ASSOCIATED_TOKEN_PROGRAM: Pubkey = Pubkey::from_str_const("ATokenGPvbdGVxr1b2hvZbsiqW5xWH25efTNsLJA8knL");
/// SPL Memo program (v2).
pub const MEMO_PROGRAM: Pubkey = Pubkey::from_str_const("MemoSq4gqABAXKb96qnH8TysNcWxMyWCqXgDLGmfcHr");
/// Token program instruction tag of `TransferChecked`.
pub const TRANSFER_CHECKED: u8 = 12;

/// Bytes of an SPL mint (a Token-2022 mint with extensions is longer, typed at [`ACCOUNT_TYPE_OFFSET`]).
pub const MINT_LEN: usize = 82;
/// Bytes of an SPL token account (Token-2022 accounts with extensions are longer).
pub const TOKEN_ACCOUNT_LEN: usize = 165;
/// Where a Token-2022 account longer than the base layouts says what it is.
pub const ACCOUNT_TYPE_OFFSET: usize = 165;
/// Offset of a token account's state byte (1 = initialized, 2 = frozen).
const TOKEN_ACCOUNT_STATE: usize = 108;

/// Bytes of an SPL multisig account: never a mint or a token account, whatever its bytes say.
const MULTISIG_LEN: usize = 355;

/// Whether `data`, owned by `program`, has the layout of the account type `kind` (1 = mint,
/// 2 = token account) of length `base`: exactly `base` bytes, or for Token-2022 longer and
/// typed as `kind` at [`ACCOUNT_TYPE_OFFSET`] (the Token program's accounts are never longer).
fn typed_as(program: &Pubkey, data: &[u8], base: usize, kind: u8) -> bool {
    match data.len() {
        len if len == base => *program == TOKEN_PROGRAM || *program == TOKEN_2022_PROGRAM,
        len if len > ACCOUNT_TYPE_OFFSET && len != MULTISIG_LEN => {
            *program == TOKEN_2022_PROGRAM && data[ACCOUNT_TYPE_OFFSET] == kind
        }
        _ => false,
    }
}

/// A token account's mint, owner, balance and whether it is frozen, when `data` (owned by
/// `program`) is an initialized token account of the Token or Token-2022 program.
#[must_use]
pub fn token_account(program: &Pubkey, data: &[u8]) -> Option<(Pubkey, Pubkey, u64, bool)> {
    if !typed_as(program, data, TOKEN_ACCOUNT_LEN, 2) {
        return None;
    }
    let mint = Pubkey::new_from_array(data[..32].try_into().ok()?);
    let owner = Pubkey::new_from_array(data[32..64].try_into().ok()?);
    let amount = u64::from_le_bytes(data[64..72].try_into().ok()?);
    match data[TOKEN_ACCOUNT_STATE] {
        1 => Some((mint, owner, amount, false)),
        2 => Some((mint, owner, amount, true)),
        _ => None,
    }
}

/// The decimals of a mint, when `data` (owned by `program`) is an initialized mint of the Token
/// program (exactly [`MINT_LEN`] bytes) or of Token-2022 (longer only when typed as a mint).
#[must_use]
pub fn mint_decimals(program: &Pubkey, data: &[u8]) -> Option<u8> {
    (typed_as(program, data, MINT_LEN, 1) && data[45] == 1).then(|| data[44])
}

/// The associated token account of `owner` for `mint` under the token `program`.
#[must_use]
pub fn associated_token_address(owner: &Pubkey, mint: &Pubkey, program: &Pubkey) -> Pubkey {
    Pubkey::find_program_address(&[owner.as_ref(), program.as_ref(), mint.as_ref()], &ASSOCIATED_TOKEN_PROGRAM).0
}

/// A `TransferChecked` of `amount` base units of `mint` (`decimals` as the mint has them) from
/// the token account `source` to `destination`, authorised by `authority`, for the token
/// `program`.
#[must_use]
pub fn transfer_checked(
    program: &Pubkey,
    (source, mint, destination): (&Pubkey, &Pubkey, &Pubkey),
    authority: &Pubkey,
    (amount, decimals): (u64, u8),
) -> Instruction {
    let mut data = Vec::with_capacity(10);
    data.push(TRANSFER_CHECKED);
    data.extend_from_slice(&amount.to_le_bytes());
    data.push(decimals);
    Instruction::new_with_bytes(
        *program,
        &data,
        vec![
            AccountMeta::new(*source, false),
            AccountMeta::new_readonly(*mint, false),
            AccountMeta::new(*destination, false),
            AccountMeta::new_readonly(*authority, true),
        ],
    )
}

/// Compute units requested when a priority fee is set. A System transfer uses 150 and each
/// compute-budget instruction 150; the rest is margin. With 1,000 units the price in
/// micro-lamports per unit is exactly the fee in lamports times 1,000, so the fee is exact.
pub const TRANSFER_COMPUTE_UNITS: u32 = 1_000;

/// A native SOL transfer to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transfer {
    /// Payer and fee payer.
    pub from: Pubkey,
    /// Recipient.
    pub to: Pubkey,
    /// Lamports moved.
    pub lamports: u64,
    /// Priority fee in lamports on top of the base fee.
    pub priority_fee: Option<u64>,
}

impl Transfer {
    /// The message: a compute-unit limit and price when there is a priority fee, then the System
    /// transfer.
    #[must_use]
    pub fn message(&self, blockhash: &Hash) -> Message {
        self.message_with_limit(blockhash, None)
    }

    /// The message with a compute-unit limit of `units` (none given: [`TRANSFER_COMPUTE_UNITS`]
    /// when there is a priority fee, else no limit). The limit changes the signature, not the
    /// fee: without a priority fee nothing is charged per unit, and with one the price is the
    /// fee spread over the units, rounded down, which the cluster's rounding up per transaction
    /// brings back to exactly the fee (for limits under 1,000,000 units).
    #[must_use]
    pub fn message_with_limit(&self, blockhash: &Hash, units: Option<u32>) -> Message {
        let fee = self.priority_fee.filter(|f| *f > 0);
        let units = units.or(fee.map(|_| TRANSFER_COMPUTE_UNITS));
        let mut instructions = Vec::with_capacity(3);
        if let Some(units) = units {
            instructions.push(ComputeBudgetInstruction::set_compute_unit_limit(units));
            if let Some(fee) = fee {
                let micro_lamports_per_unit = fee.saturating_mul(1_000_000) / u64::from(units.max(1));
                instructions.push(ComputeBudgetInstruction::set_compute_unit_price(micro_lamports_per_unit));
            }
        }
        instructions.push(solana_system_interface::instruction::transfer(&self.from, &self.to, self.lamports));
        Message::new_with_blockhash(&instructions, Some(&self.from), blockhash)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transfer_checked_is_tag_12_amount_and_decimals() {
        let [program, source, mint, destination, authority] =
            [1u8, 2, 3, 4, 5].map(|b| Pubkey::new_from_array([b; 32]));
        let ix = transfer_checked(&program, (&source, &mint, &destination), &authority, (1_000_000, 6));
        assert_eq!(ix.data, [12, 64, 66, 15, 0, 0, 0, 0, 0, 6]);
        let writable: Vec<_> = ix.accounts.iter().map(|a| (a.pubkey, a.is_writable, a.is_signer)).collect();
        assert_eq!(
            writable,
            [(source, true, false), (mint, false, false), (destination, true, false), (authority, false, true)]
        );
    }

    #[test]
    fn priority_fee_becomes_an_exact_compute_unit_price() {
        let t = Transfer {
            from: Pubkey::new_unique(),
            to: Pubkey::new_unique(),
            lamports: 10_000_000,
            priority_fee: Some(10_000),
        };
        let m = t.message(&Hash::default());
        assert_eq!(m.instructions.len(), 3);
        let price = &m.instructions[1].data;
        // set_compute_unit_price: tag 3, then u64 little endian.
        assert_eq!(price[0], 3);
        assert_eq!(u64::from_le_bytes(price[1..9].try_into().unwrap()), 10_000_000);
        assert_eq!(Transfer { priority_fee: None, ..t }.message(&Hash::default()).instructions.len(), 1);
    }

    /// Whatever the limit that makes a transfer unique, the priority fee charged is exactly the
    /// one asked: the cluster charges ceil(price × units / 1,000,000) lamports.
    #[test]
    fn a_unique_limit_keeps_the_priority_fee_exact() {
        let t =
            Transfer { from: Pubkey::new_unique(), to: Pubkey::new_unique(), lamports: 1, priority_fee: Some(10_000) };
        for units in [1_000u32, 1_001, 1_777, 54_321, 100_999, 999_999] {
            let m = t.message_with_limit(&Hash::default(), Some(units));
            let price = u64::from_le_bytes(m.instructions[1].data[1..9].try_into().unwrap());
            let charged = (u128::from(price) * u128::from(units)).div_ceil(1_000_000);
            assert_eq!(charged, 10_000, "{units} units");
        }
        let plain = Transfer { priority_fee: None, ..t }.message_with_limit(&Hash::default(), Some(1_234));
        assert_eq!(plain.instructions.len(), 2, "a limit, no price");
    }

    #[test]
    fn token_accounts_parse_strictly() {
        let (mint, owner) = (Pubkey::new_unique(), Pubkey::new_unique());
        let mut data = vec![0u8; TOKEN_ACCOUNT_LEN];
        data[..32].copy_from_slice(mint.as_ref());
        data[32..64].copy_from_slice(owner.as_ref());
        data[64..72].copy_from_slice(&42u64.to_le_bytes());
        data[TOKEN_ACCOUNT_STATE] = 1;
        assert_eq!(token_account(&TOKEN_PROGRAM, &data), Some((mint, owner, 42, false)));
        assert_eq!(token_account(&Pubkey::new_unique(), &data), None, "not a token program");
        assert_eq!(token_account(&TOKEN_PROGRAM, &data[..100]), None);
        assert_eq!(mint_decimals(&TOKEN_PROGRAM, &data), None, "a token account is not a mint");
        data[TOKEN_ACCOUNT_STATE] = 2;
        assert_eq!(token_account(&TOKEN_2022_PROGRAM, &data), Some((mint, owner, 42, true)), "frozen");
        data[TOKEN_ACCOUNT_STATE] = 0;
        assert_eq!(token_account(&TOKEN_PROGRAM, &data), None, "uninitialized");
    }

    #[test]
    fn mints_are_read_by_their_programs_layout() {
        let mut mint = vec![0u8; MINT_LEN];
        mint[44] = 6;
        mint[45] = 1;
        assert_eq!(mint_decimals(&TOKEN_PROGRAM, &mint), Some(6));
        assert_eq!(mint_decimals(&TOKEN_2022_PROGRAM, &mint), Some(6));
        assert_eq!(mint_decimals(&Pubkey::new_unique(), &mint), None, "another program's account");
        // Token-2022 with extensions: typed as a mint at byte 165, or not a mint.
        let mut extended = mint.clone();
        extended.resize(ACCOUNT_TYPE_OFFSET, 0);
        extended.extend_from_slice(&[1, 0, 0]);
        assert_eq!(mint_decimals(&TOKEN_2022_PROGRAM, &extended), Some(6));
        assert_eq!(mint_decimals(&TOKEN_PROGRAM, &extended), None, "the Token program's mints are 82 bytes");
        extended[ACCOUNT_TYPE_OFFSET] = 2;
        assert_eq!(mint_decimals(&TOKEN_2022_PROGRAM, &extended), None, "typed as a token account");
        mint[45] = 0;
        assert_eq!(mint_decimals(&TOKEN_PROGRAM, &mint), None, "uninitialized");
        assert_eq!(mint_decimals(&TOKEN_PROGRAM, &mint[..50]), None);
    }

    /// A multisig (355 bytes) whose signer keys put "token account" and "initialized" where a
    /// Token-2022 account's type and state are is neither (an attack on the embedded ledger's
    /// token balances).
    #[test]
    fn a_multisig_is_never_read_as_a_token_account_or_a_mint() {
        let mut multisig = vec![7u8; MULTISIG_LEN];
        multisig[TOKEN_ACCOUNT_STATE] = 1;
        multisig[45] = 1;
        for kind in [1, 2] {
            multisig[ACCOUNT_TYPE_OFFSET] = kind;
            for program in [TOKEN_PROGRAM, TOKEN_2022_PROGRAM] {
                assert_eq!(token_account(&program, &multisig), None);
                assert_eq!(mint_decimals(&program, &multisig), None);
            }
        }
        let mut long = vec![0u8; 200];
        long[TOKEN_ACCOUNT_STATE] = 1;
        long[ACCOUNT_TYPE_OFFSET] = 2;
        assert!(token_account(&TOKEN_2022_PROGRAM, &long).is_some(), "an extended Token-2022 account");
        assert_eq!(token_account(&TOKEN_PROGRAM, &long), None, "the Token program's accounts are 165 bytes");
    }
}
