//! SPL Token and Token-2022 mints: decimals, supply, authorities, and a name and symbol from the
//! Token-2022 metadata extension or, failing that, the Metaplex metadata account.
//!
//! Layouts read here (little endian throughout):
//! * Mint, 82 bytes: mint authority `COption<Pubkey>` (u32 tag + 32), supply u64, decimals u8,
//!   initialized bool, freeze authority `COption<Pubkey>`.
//! * Token-2022 extensions: byte 165 is the account type (1 = mint), then TLV entries
//!   (u16 type, u16 length, value); type 19 is `TokenMetadata` (borsh: update authority 32,
//!   mint 32, name, symbol, uri as u32-length strings, ...).
//! * Metaplex metadata (PDA `["metadata", program, mint]`): key u8, update authority 32, mint 32,
//!   name and symbol as u32-length strings padded with NULs.

use solana_sdk::pubkey::Pubkey;
use tollgate_protocol::gateway::TokenStandard;

/// SPL Token program.
pub const TOKEN_PROGRAM: Pubkey = Pubkey::from_str_const("TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA");
/// Token-2022 program.
pub const TOKEN_2022_PROGRAM: Pubkey = Pubkey::from_str_const("TokenzQdBNbLqP5VEhdkAS6EPFLC1PHnBqCXEpPxuEb");
/// Metaplex token metadata program.
pub const METAPLEX_METADATA: Pubkey = Pubkey::from_str_const("metaqbxxUerdq28cj1RbAWkYQm3ybzjb6a8bt518x1s");

const MINT_LEN: usize = 82;
const ACCOUNT_TYPE_OFFSET: usize = 165;
const ACCOUNT_TYPE_MINT: u8 = 1;
const EXTENSION_TOKEN_METADATA: u16 = 19;

/// A mint as read from its account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mint {
    /// Which token program owns it.
    pub standard: TokenStandard,
    /// Decimals.
    pub decimals: u8,
    /// Supply in base units.
    pub supply: u64,
    /// Who may mint.
    pub mint_authority: Option<Pubkey>,
    /// Who may freeze.
    pub freeze_authority: Option<Pubkey>,
    /// Name from the Token-2022 metadata extension.
    pub name: Option<String>,
    /// Symbol from the Token-2022 metadata extension.
    pub symbol: Option<String>,
}

fn coption_pubkey(bytes: &[u8]) -> Option<Option<Pubkey>> {
    let tag = u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?);
    let key: [u8; 32] = bytes.get(4..36)?.try_into().ok()?;
    match tag {
        0 => Some(None),
        1 => Some(Some(Pubkey::new_from_array(key))),
        _ => None,
    }
}

/// Reads a borsh string (u32 length, UTF-8), returning it and the rest.
fn borsh_string(bytes: &[u8]) -> Option<(String, &[u8])> {
    let len = usize::try_from(u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?)).ok()?;
    let text = bytes.get(4..4usize.checked_add(len)?)?;
    Some((String::from_utf8_lossy(text).trim_end_matches('\0').trim().to_owned(), &bytes[4 + len..]))
}

fn non_empty(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

/// Parses a mint account owned by `owner`; `None` when it is not an initialized mint.
#[must_use]
pub fn parse_mint(owner: &Pubkey, data: &[u8]) -> Option<Mint> {
    let standard = if *owner == TOKEN_PROGRAM {
        TokenStandard::SplToken
    } else if *owner == TOKEN_2022_PROGRAM {
        TokenStandard::Token2022
    } else {
        return None;
    };
    if data.len() < MINT_LEN || data[45] != 1 {
        return None;
    }
    // A plain SPL token account is 165 bytes: not a mint.
    if standard == TokenStandard::SplToken && data.len() != MINT_LEN {
        return None;
    }
    let mut mint = Mint {
        standard,
        decimals: data[44],
        supply: u64::from_le_bytes(data[36..44].try_into().ok()?),
        mint_authority: coption_pubkey(&data[0..36])?,
        freeze_authority: coption_pubkey(&data[46..82])?,
        name: None,
        symbol: None,
    };
    if standard == TokenStandard::Token2022 && data.len() > MINT_LEN {
        if data.get(ACCOUNT_TYPE_OFFSET) != Some(&ACCOUNT_TYPE_MINT) {
            return None;
        }
        let mut tlv = &data[ACCOUNT_TYPE_OFFSET + 1..];
        while tlv.len() >= 4 {
            let kind = u16::from_le_bytes([tlv[0], tlv[1]]);
            let len = usize::from(u16::from_le_bytes([tlv[2], tlv[3]]));
            let Some(value) = tlv.get(4..4 + len) else { break };
            if kind == EXTENSION_TOKEN_METADATA
                && let Some((name, rest)) = value.get(64..).and_then(borsh_string)
                && let Some((symbol, _)) = borsh_string(rest)
            {
                mint.name = non_empty(name);
                mint.symbol = non_empty(symbol);
            }
            tlv = &tlv[4 + len..];
        }
    }
    Some(mint)
}

/// The Metaplex metadata account of a mint.
#[must_use]
pub fn metaplex_address(mint: &Pubkey) -> Pubkey {
    Pubkey::find_program_address(&[b"metadata", METAPLEX_METADATA.as_ref(), mint.as_ref()], &METAPLEX_METADATA).0
}

/// Name and symbol from a Metaplex metadata account of `mint`.
#[must_use]
pub fn parse_metaplex(mint: &Pubkey, data: &[u8]) -> Option<(Option<String>, Option<String>)> {
    // key (1) + update authority (32), then the mint it describes.
    if data.get(33..65)? != mint.as_ref() {
        return None;
    }
    let (name, rest) = borsh_string(data.get(65..)?)?;
    let (symbol, _) = borsh_string(rest)?;
    Some((non_empty(name), non_empty(symbol)))
}

/// Everything `/token/info` shows about a mint; `None` when the account is missing or is not a
/// mint.
///
/// # Errors
/// [`crate::chains::ChainError`] when the node fails.
pub async fn token_info(
    rpc: &super::rpc::SolanaRpc,
    mint: &Pubkey,
) -> Result<Option<tollgate_protocol::gateway::TokenInfo>, crate::chains::ChainError> {
    let Some((owner, data)) = rpc.account(mint).await? else { return Ok(None) };
    let Some(parsed) = parse_mint(&owner, &data) else { return Ok(None) };
    let (mut name, mut symbol) = (parsed.name.clone(), parsed.symbol.clone());
    if name.is_none()
        && symbol.is_none()
        && let Some((meta_owner, meta)) = rpc.account(&metaplex_address(mint)).await?
        && meta_owner == METAPLEX_METADATA
        && let Some((n, s)) = parse_metaplex(mint, &meta)
    {
        (name, symbol) = (n, s);
    }
    Ok(Some(tollgate_protocol::gateway::TokenInfo {
        address: mint.to_string(),
        network: rpc.network().clone(),
        standard: parsed.standard,
        name,
        symbol,
        decimals: parsed.decimals,
        supply: tollgate_protocol::AtomicAmount::from(parsed.supply),
        mint_authority: parsed.mint_authority.map(|k| k.to_string()),
        freeze_authority: parsed.freeze_authority.map(|k| k.to_string()),
    }))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An 82-byte mint.
    pub(crate) fn mint_bytes(authority: Option<Pubkey>, supply: u64, decimals: u8, freeze: Option<Pubkey>) -> Vec<u8> {
        let mut d = Vec::with_capacity(MINT_LEN);
        let coption = |d: &mut Vec<u8>, k: Option<Pubkey>| {
            d.extend_from_slice(&u32::from(k.is_some()).to_le_bytes());
            d.extend_from_slice(k.unwrap_or_default().as_ref());
        };
        coption(&mut d, authority);
        d.extend_from_slice(&supply.to_le_bytes());
        d.push(decimals);
        d.push(1);
        coption(&mut d, freeze);
        d
    }

    fn borsh(s: &str) -> Vec<u8> {
        let mut v = u32::try_from(s.len()).unwrap().to_le_bytes().to_vec();
        v.extend_from_slice(s.as_bytes());
        v
    }

    /// A Token-2022 mint with a metadata extension.
    pub(crate) fn mint_2022_with_metadata(base: &[u8], mint: &Pubkey, name: &str, symbol: &str) -> Vec<u8> {
        let mut d = base.to_vec();
        d.resize(ACCOUNT_TYPE_OFFSET, 0);
        d.push(ACCOUNT_TYPE_MINT);
        let mut value = vec![0u8; 32];
        value.extend_from_slice(mint.as_ref());
        for s in [name, symbol, "https://example.org/meta.json"] {
            value.extend(borsh(s));
        }
        value.extend_from_slice(&0u32.to_le_bytes());
        d.extend_from_slice(&EXTENSION_TOKEN_METADATA.to_le_bytes());
        d.extend_from_slice(&u16::try_from(value.len()).unwrap().to_le_bytes());
        d.extend(value);
        d
    }

    /// A Metaplex metadata account (name padded to 32, symbol to 10, as Metaplex stores them).
    pub(crate) fn metaplex_bytes(mint: &Pubkey, name: &str, symbol: &str) -> Vec<u8> {
        let mut d = vec![4u8];
        d.extend_from_slice(Pubkey::new_unique().as_ref());
        d.extend_from_slice(mint.as_ref());
        d.extend(borsh(&format!("{name:\0<32}")));
        d.extend(borsh(&format!("{symbol:\0<10}")));
        d.extend(borsh("https://example.org"));
        d
    }

    #[test]
    fn spl_mint() {
        let authority = Pubkey::new_unique();
        let m = parse_mint(&TOKEN_PROGRAM, &mint_bytes(Some(authority), 1_000_000, 6, None)).unwrap();
        assert_eq!((m.standard, m.decimals, m.supply), (TokenStandard::SplToken, 6, 1_000_000));
        assert_eq!((m.mint_authority, m.freeze_authority), (Some(authority), None));
        assert!(parse_mint(&Pubkey::new_unique(), &mint_bytes(None, 1, 6, None)).is_none(), "other owner");
        assert!(parse_mint(&TOKEN_PROGRAM, &[0u8; 165]).is_none(), "a token account");
        let mut uninitialized = mint_bytes(None, 1, 6, None);
        uninitialized[45] = 0;
        assert!(parse_mint(&TOKEN_PROGRAM, &uninitialized).is_none());
        assert!(parse_mint(&TOKEN_PROGRAM, &[1, 2, 3]).is_none());
    }

    /// Writes an account straight into the embedded ledger (surfpool's `surfnet_setAccount`).
    async fn set_account(rpc_url: &str, address: &Pubkey, owner: &Pubkey, data: &[u8]) {
        let hex: String = data.iter().map(|b| format!("{b:02x}")).collect();
        let body = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "surfnet_setAccount",
            "params": [address.to_string(), {"lamports": 10_000_000, "data": hex, "owner": owner.to_string()}]});
        let answer: serde_json::Value =
            reqwest::Client::new().post(rpc_url).json(&body).send().await.unwrap().json().await.unwrap();
        assert!(answer.get("error").is_none(), "{answer}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn token_info_reads_mints_from_the_ledger() {
        use crate::chains::solana::embedded::EmbeddedLedger;
        use crate::chains::solana::rpc::{DEFAULT_CALL_TIMEOUT, SolanaRpc};
        let ledger = EmbeddedLedger::start().await.unwrap();
        let rpc = SolanaRpc::connect(ledger.rpc_url(), DEFAULT_CALL_TIMEOUT).await.unwrap();
        let (spl, t22, authority) = (Pubkey::new_unique(), Pubkey::new_unique(), Pubkey::new_unique());
        set_account(ledger.rpc_url(), &spl, &TOKEN_PROGRAM, &mint_bytes(Some(authority), 21_000_000_000_000, 6, None))
            .await;
        set_account(
            ledger.rpc_url(),
            &metaplex_address(&spl),
            &METAPLEX_METADATA,
            &metaplex_bytes(&spl, "Wrapped Thing", "WT"),
        )
        .await;
        let with_metadata =
            mint_2022_with_metadata(&mint_bytes(None, 42, 9, Some(authority)), &t22, "Tollgate Dollar", "TGD");
        set_account(ledger.rpc_url(), &t22, &TOKEN_2022_PROGRAM, &with_metadata).await;

        let info = token_info(&rpc, &spl).await.unwrap().unwrap();
        assert_eq!((info.standard, info.decimals, info.supply.get()), (TokenStandard::SplToken, 6, 21_000_000_000_000));
        assert_eq!((info.name.as_deref(), info.symbol.as_deref()), (Some("Wrapped Thing"), Some("WT")));
        assert_eq!(info.mint_authority, Some(authority.to_string()));
        assert_eq!(info.freeze_authority, None);
        assert_eq!(&info.network, rpc.network());

        let info = token_info(&rpc, &t22).await.unwrap().unwrap();
        assert_eq!((info.standard, info.decimals, info.supply.get()), (TokenStandard::Token2022, 9, 42));
        assert_eq!((info.name.as_deref(), info.symbol.as_deref()), (Some("Tollgate Dollar"), Some("TGD")));
        assert_eq!((info.mint_authority, info.freeze_authority), (None, Some(authority.to_string())));

        assert!(token_info(&rpc, &Pubkey::new_unique()).await.unwrap().is_none(), "no account");
        let not_a_mint = Pubkey::new_unique();
        set_account(ledger.rpc_url(), &not_a_mint, &TOKEN_PROGRAM, &[0u8; 165]).await;
        assert!(token_info(&rpc, &not_a_mint).await.unwrap().is_none(), "a token account is not a mint");
    }

    #[test]
    fn token_2022_metadata_and_metaplex() {
        let mint = Pubkey::new_unique();
        let data = mint_2022_with_metadata(&mint_bytes(None, 5, 9, Some(mint)), &mint, "Tollgate Dollar", "TGD");
        let m = parse_mint(&TOKEN_2022_PROGRAM, &data).unwrap();
        assert_eq!((m.name.as_deref(), m.symbol.as_deref()), (Some("Tollgate Dollar"), Some("TGD")));
        assert_eq!(m.freeze_authority, Some(mint));
        let meta = metaplex_bytes(&mint, "Wrapped Thing", "WT");
        assert_eq!(parse_metaplex(&mint, &meta), Some((Some("Wrapped Thing".into()), Some("WT".into()))));
        assert_eq!(parse_metaplex(&Pubkey::new_unique(), &meta), None, "metadata of another mint");
        // Truncated TLV or garbage never panics.
        for cut in 0..data.len() {
            let _ = parse_mint(&TOKEN_2022_PROGRAM, &data[..cut]);
            let _ = parse_metaplex(&mint, &meta[..cut.min(meta.len())]);
        }
    }
}
