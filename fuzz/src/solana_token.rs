//! Token and Token-2022 account data as the facilitator reads it from the chain: mints with
//! their extensions (`token::parse_mint`) and token accounts (`encoding::solana::token_account`).
//! A mint's account is written by whoever created the token: any bytes.

use tollgate_facilitator::chains::solana::token::{TOKEN_2022_PROGRAM, TOKEN_PROGRAM, parse_mint};

/// What this target feeds and what it asserts.
pub const ABOUT: &str = "Token / Token-2022 mints and token accounts: decimals, supply, balances and owners are the \
                         bytes at their offsets; every extension the account lists is read, and one that cannot \
                         be settled exactly (fees, hooks, delegates, confidential, frozen, unknown) refuses";

/// The first byte picks the owning program (even: Token, odd: Token-2022); the rest is the data.
/// Runs one input; panics when a property breaks.
pub fn check(data: &[u8]) {
    let Some((selector, data)) = data.split_first() else { return };
    let program = if selector % 2 == 0 { TOKEN_PROGRAM } else { TOKEN_2022_PROGRAM };
    if let Some((mint, owner, amount, frozen)) = tollgate_encoding::solana::token_account(&program, data) {
        assert_eq!(mint.as_ref(), &data[..32]);
        assert_eq!(owner.as_ref(), &data[32..64]);
        assert_eq!(amount, u64::from_le_bytes(data[64..72].try_into().expect("eight bytes")));
        assert_eq!(frozen, data[108] == 2, "an account's frozen state is not its byte");
        assert!(matches!(data[108], 1 | 2), "an account neither initialized nor frozen was read");
    }
    let Some(mint) = parse_mint(&program, data) else { return };
    assert_eq!(mint.decimals, data[44], "decimals are not the mint's byte");
    assert_eq!(mint.supply, u64::from_le_bytes(data[36..44].try_into().expect("eight bytes")));
    assert_eq!(data[45], 1, "an uninitialized mint was read");
    if program == TOKEN_PROGRAM {
        assert_eq!(data.len(), tollgate_encoding::solana::MINT_LEN, "a Token mint of another length was read");
        assert!(mint.extensions.is_empty());
        return;
    }
    let kinds = listed_extensions(data);
    let read: Vec<String> = mint.extensions.iter().map(|e| e.name()).collect();
    assert_eq!(read.len(), kinds.len(), "extensions listed {kinds:?}, read {read:?}");
    let refusing = kinds.iter().any(|kind| refuses_whatever_its_value(*kind));
    if refusing {
        assert!(mint.refusal().is_some(), "a mint with extensions {kinds:?} was not refused");
    }
    if mint.refusal().is_none() {
        assert!(mint.extensions.iter().all(|e| e.refusal().is_none()));
    }
}

/// The extension types a Token-2022 mint's TLV area lists (type 0 pads), read here up to the
/// first entry that does not fit.
fn listed_extensions(data: &[u8]) -> Vec<u16> {
    let mut kinds = Vec::new();
    if data.len() <= tollgate_encoding::solana::MINT_LEN {
        return kinds;
    }
    let mut at = tollgate_encoding::solana::ACCOUNT_TYPE_OFFSET + 1;
    while let Some(head) = data.get(at..at + 4) {
        let kind = u16::from_le_bytes([head[0], head[1]]);
        let len = usize::from(u16::from_le_bytes([head[2], head[3]]));
        if data.len() < at + 4 + len {
            break;
        }
        if kind != 0 {
            kinds.push(kind);
        }
        at += 4 + len;
    }
    kinds
}

/// Extensions a payment cannot be settled exactly with, whatever they hold: confidential
/// transfers (4, 16, 24), non-transferable (9), interest-bearing (10), scaled UI amounts (25),
/// pausable (26), and any type this facilitator does not know.
fn refuses_whatever_its_value(kind: u16) -> bool {
    let known_harmless_or_valued = matches!(kind, 1 | 3 | 6 | 12 | 14 | 18..=23);
    !known_harmless_or_valued
}
