//! SPL Token and Token-2022 mints: decimals, supply, authorities, and a name and symbol from the
//! Token-2022 metadata extension or, failing that, the Metaplex metadata account.
//!
//! Layouts read here (little endian throughout):
//! * Mint, 82 bytes: mint authority `COption<Pubkey>` (u32 tag + 32), supply u64, decimals u8,
//!   initialized bool, freeze authority `COption<Pubkey>`.
//! * Token-2022 extensions: byte 165 is the account type (1 = mint), then TLV entries
//!   (u16 type, u16 length, value); type 19 is `TokenMetadata` (borsh: update authority 32,
//!   mint 32, name, symbol, uri as u32-length strings, ...). Every extension is read into an
//!   [`Extension`], and [`Mint::refusal`] says whether a payment in the mint can be settled
//!   exactly: a plain mint and metadata can; a transfer fee, a transfer hook, a permanent
//!   delegate, confidential transfers, non-transferable, pausable, frozen-by-default,
//!   interest-bearing and scaled-UI mints cannot.
//! * Metaplex metadata (PDA `["metadata", program, mint]`): key u8, update authority 32, mint 32,
//!   name and symbol as u32-length strings padded with NULs.

use solana_sdk::pubkey::Pubkey;
use tollgate_protocol::gateway::TokenStandard;

/// Token-2022 program.
pub use tollgate_encoding::solana::TOKEN_2022_PROGRAM;
/// SPL Token program.
pub use tollgate_encoding::solana::TOKEN_PROGRAM;
/// Metaplex token metadata program.
pub const METAPLEX_METADATA: Pubkey = Pubkey::from_str_const("metaqbxxUerdq28cj1RbAWkYQm3ybzjb6a8bt518x1s");

use tollgate_encoding::solana::{ACCOUNT_TYPE_OFFSET, MINT_LEN};
#[cfg(test)]
const ACCOUNT_TYPE_MINT: u8 = 1;
const EXTENSION_TOKEN_METADATA: u16 = 19;

/// A Token-2022 mint extension, as far as it decides whether a payment in the mint settles
/// exactly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Extension {
    /// `TransferFeeConfig` (1): the older and newer fees, (basis points, maximum fee).
    TransferFee {
        /// The fee in force before the newer one's epoch, and the newer one.
        fees: [(u16, u64); 2],
    },
    /// `MintCloseAuthority` (3).
    MintCloseAuthority,
    /// `ConfidentialTransferMint` (4), `ConfidentialTransferFeeConfig` (16),
    /// `ConfidentialMintBurn` (24).
    Confidential(u16),
    /// `DefaultAccountState` (6): whether new token accounts start frozen.
    DefaultAccountState {
        /// Frozen by default.
        frozen: bool,
    },
    /// `NonTransferable` (9).
    NonTransferable,
    /// `InterestBearingConfig` (10).
    InterestBearing,
    /// `PermanentDelegate` (12).
    PermanentDelegate {
        /// Who may move anyone's tokens (none once given up).
        delegate: Option<Pubkey>,
    },
    /// `TransferHook` (14).
    TransferHook {
        /// The program every transfer calls (none: no hook).
        program: Option<Pubkey>,
    },
    /// `MetadataPointer` (18), `TokenMetadata` (19), `GroupPointer` (20), `TokenGroup` (21),
    /// `GroupMemberPointer` (22), `TokenGroupMember` (23): descriptions only.
    Metadata(u16),
    /// `ScaledUiAmount` (25).
    ScaledUiAmount,
    /// `Pausable` (26).
    Pausable,
    /// Any other type: none a mint has that this facilitator knows.
    Other(u16),
}

/// A 32-byte key where all zeroes means none (Token-2022's `OptionalNonZeroPubkey`).
fn optional_key(bytes: Option<&[u8]>) -> Option<Pubkey> {
    let key: [u8; 32] = bytes?.try_into().ok()?;
    (key != [0; 32]).then(|| Pubkey::new_from_array(key))
}

impl Extension {
    /// Reads TLV entry `kind` with `value`.
    fn read(kind: u16, value: &[u8]) -> Self {
        let fee = |at: usize| -> Option<(u16, u64)> {
            // TransferFee: epoch u64, maximum fee u64, basis points u16.
            let max = u64::from_le_bytes(value.get(at + 8..at + 16)?.try_into().ok()?);
            let bps = u16::from_le_bytes(value.get(at + 16..at + 18)?.try_into().ok()?);
            Some((bps, max))
        };
        match kind {
            // Authorities (32 + 32), withheld amount (8), then the older and newer fees.
            1 => match (fee(72), fee(90)) {
                (Some(older), Some(newer)) => Self::TransferFee { fees: [older, newer] },
                _ => Self::Other(kind),
            },
            3 => Self::MintCloseAuthority,
            4 | 16 | 24 => Self::Confidential(kind),
            // AccountState: 1 initialized, 2 frozen.
            6 => Self::DefaultAccountState { frozen: value.first() != Some(&1) },
            9 => Self::NonTransferable,
            10 => Self::InterestBearing,
            12 => Self::PermanentDelegate { delegate: optional_key(value.get(..32)) },
            // Authority (32), then the program.
            14 => Self::TransferHook { program: optional_key(value.get(32..64)) },
            18..=23 => Self::Metadata(kind),
            25 => Self::ScaledUiAmount,
            26 => Self::Pausable,
            _ => Self::Other(kind),
        }
    }

    /// Its name, as `/token/info` lists it.
    #[must_use]
    pub fn name(&self) -> String {
        match self {
            Self::TransferFee { .. } => "transferFeeConfig".into(),
            Self::MintCloseAuthority => "mintCloseAuthority".into(),
            Self::Confidential(4) => "confidentialTransferMint".into(),
            Self::Confidential(16) => "confidentialTransferFeeConfig".into(),
            Self::Confidential(_) => "confidentialMintBurn".into(),
            Self::DefaultAccountState { .. } => "defaultAccountState".into(),
            Self::NonTransferable => "nonTransferable".into(),
            Self::InterestBearing => "interestBearingConfig".into(),
            Self::PermanentDelegate { .. } => "permanentDelegate".into(),
            Self::TransferHook { .. } => "transferHook".into(),
            Self::Metadata(18) => "metadataPointer".into(),
            Self::Metadata(19) => "tokenMetadata".into(),
            Self::Metadata(20) => "groupPointer".into(),
            Self::Metadata(21) => "tokenGroup".into(),
            Self::Metadata(22) => "groupMemberPointer".into(),
            Self::Metadata(_) => "tokenGroupMember".into(),
            Self::ScaledUiAmount => "scaledUiAmount".into(),
            Self::Pausable => "pausable".into(),
            Self::Other(kind) => format!("extension{kind}"),
        }
    }

    /// Why a payment in a mint with this extension cannot be settled exactly, if it cannot.
    #[must_use]
    pub fn refusal(&self) -> Option<String> {
        Some(match self {
            Self::MintCloseAuthority | Self::Metadata(_) => return None,
            Self::TransferFee { fees } => {
                let (bps, max) = fees.iter().copied().find(|(bps, max)| *bps > 0 && *max > 0)?;
                format!(
                    "it keeps a transfer fee ({bps} basis points, at most {max} base units): the payee would receive less than is paid"
                )
            }
            Self::Confidential(_) => "it allows confidential transfers, whose amounts cannot be read".into(),
            Self::DefaultAccountState { frozen: false } => return None,
            Self::DefaultAccountState { frozen: true } => {
                "its new token accounts start frozen: the payee's may not receive".into()
            }
            Self::NonTransferable => "its tokens cannot be transferred".into(),
            Self::InterestBearing => "it bears interest: the amount it shows changes over time".into(),
            Self::ScaledUiAmount => "its amounts are shown scaled by a factor that can change".into(),
            Self::PermanentDelegate { delegate: None } | Self::TransferHook { program: None } => return None,
            Self::PermanentDelegate { delegate: Some(d) } => {
                format!("its permanent delegate {d} can move anyone's tokens, the payee's too")
            }
            Self::TransferHook { program: Some(p) } => {
                format!("every transfer runs its hook program {p}, which may refuse or change it")
            }
            Self::Pausable => "its transfers can be paused".into(),
            Self::Other(kind) => format!("it has extension {kind}, which this facilitator does not know"),
        })
    }

    /// Whether what it says can change after the mint is made (a fee scheduled, a hook or a
    /// delegate set, the default state switched): a mint with one is read again for each
    /// payment; one without is remembered.
    #[must_use]
    pub const fn changeable(&self) -> bool {
        !matches!(self, Self::MintCloseAuthority | Self::Metadata(_))
    }
}

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
    /// Token-2022 extensions, in the order the account lists them.
    pub extensions: Vec<Extension>,
}

impl Mint {
    /// Why a payment in this mint cannot be settled exactly, if it cannot (the first reason).
    #[must_use]
    pub fn refusal(&self) -> Option<String> {
        self.extensions.iter().find_map(Extension::refusal)
    }

    /// Whether its facts and the verdict of [`Self::refusal`] hold for good.
    #[must_use]
    pub fn settled_for_good(&self) -> bool {
        !self.extensions.iter().any(Extension::changeable)
    }
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
    // An initialized mint of its program's layout (a 165-byte token account is not one).
    let decimals = tollgate_encoding::solana::mint_decimals(owner, data)?;
    let mut mint = Mint {
        standard,
        decimals,
        supply: u64::from_le_bytes(data[36..44].try_into().ok()?),
        mint_authority: coption_pubkey(&data[0..36])?,
        freeze_authority: coption_pubkey(&data[46..82])?,
        name: None,
        symbol: None,
        extensions: Vec::new(),
    };
    if standard == TokenStandard::Token2022 && data.len() > MINT_LEN {
        let mut tlv = &data[ACCOUNT_TYPE_OFFSET + 1..];
        while tlv.len() >= 4 {
            let kind = u16::from_le_bytes([tlv[0], tlv[1]]);
            let len = usize::from(u16::from_le_bytes([tlv[2], tlv[3]]));
            let Some(value) = tlv.get(4..4 + len) else { break };
            // Type 0 pads the account.
            if kind != 0 {
                mint.extensions.push(Extension::read(kind, value));
            }
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
        extensions: parsed.extensions.iter().map(Extension::name).collect(),
        refused: parsed.refusal(),
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

    /// A Token-2022 mint with the given extensions, (type, value) in order.
    pub(crate) fn mint_2022(base: &[u8], extensions: &[(u16, Vec<u8>)]) -> Vec<u8> {
        let mut d = base.to_vec();
        d.resize(ACCOUNT_TYPE_OFFSET, 0);
        d.push(ACCOUNT_TYPE_MINT);
        for (kind, value) in extensions {
            d.extend_from_slice(&kind.to_le_bytes());
            d.extend_from_slice(&u16::try_from(value.len()).unwrap().to_le_bytes());
            d.extend_from_slice(value);
        }
        d
    }

    /// A `TransferFeeConfig` value: authorities, withheld amount, older and newer fees.
    pub(crate) fn transfer_fee(older: (u16, u64), newer: (u16, u64)) -> Vec<u8> {
        let mut v = vec![7u8; 64];
        v.extend_from_slice(&0u64.to_le_bytes());
        for (epoch, (bps, max)) in [(0u64, older), (5, newer)] {
            v.extend_from_slice(&epoch.to_le_bytes());
            v.extend_from_slice(&max.to_le_bytes());
            v.extend_from_slice(&bps.to_le_bytes());
        }
        v
    }

    /// Every extension a mint can have, read and judged: descriptions pass, whatever makes
    /// the payee receive less, another amount, or maybe nothing is refused, with its reason.
    #[test]
    fn token_2022_extensions_are_judged_one_by_one() {
        let base = mint_bytes(None, 1_000, 6, None);
        let key = Pubkey::new_unique();
        let mut hook = vec![1u8; 32];
        hook.extend_from_slice(key.as_ref());
        let mut no_hook = vec![1u8; 32];
        no_hook.extend_from_slice(&[0; 32]);
        let cases: Vec<(u16, Vec<u8>, &str, Option<&str>)> = vec![
            (1, transfer_fee((0, 0), (0, 0)), "transferFeeConfig", None),
            (1, transfer_fee((0, 0), (50, 1_000)), "transferFeeConfig", Some("transfer fee (50 basis points")),
            (1, transfer_fee((100, 0), (0, 0)), "transferFeeConfig", None),
            (3, vec![0; 32], "mintCloseAuthority", None),
            (4, vec![0; 65], "confidentialTransferMint", Some("confidential transfers")),
            (6, vec![1], "defaultAccountState", None),
            (6, vec![2], "defaultAccountState", Some("start frozen")),
            (9, vec![], "nonTransferable", Some("cannot be transferred")),
            (10, vec![0; 52], "interestBearingConfig", Some("bears interest")),
            (12, vec![0; 32], "permanentDelegate", None),
            (12, key.to_bytes().to_vec(), "permanentDelegate", Some("can move anyone's tokens")),
            (14, no_hook, "transferHook", None),
            (14, hook, "transferHook", Some("hook program")),
            (16, vec![0; 72], "confidentialTransferFeeConfig", Some("confidential transfers")),
            (18, vec![0; 64], "metadataPointer", None),
            (20, vec![0; 64], "groupPointer", None),
            (21, vec![0; 80], "tokenGroup", None),
            (22, vec![0; 64], "groupMemberPointer", None),
            (23, vec![0; 72], "tokenGroupMember", None),
            (24, vec![0; 64], "confidentialMintBurn", Some("confidential transfers")),
            (25, vec![0; 56], "scaledUiAmount", Some("scaled")),
            (26, vec![0; 33], "pausable", Some("can be paused")),
            (2, vec![0; 8], "extension2", Some("does not know")),
            (999, vec![], "extension999", Some("does not know")),
        ];
        for (kind, value, name, refused) in cases {
            let m = parse_mint(&TOKEN_2022_PROGRAM, &mint_2022(&base, &[(kind, value)])).unwrap();
            assert_eq!(m.extensions.iter().map(Extension::name).collect::<Vec<_>>(), [name], "{kind}");
            match (m.refusal(), refused) {
                (None, None) => {}
                (Some(why), Some(part)) => assert!(why.contains(part), "{kind}: {why}"),
                other => panic!("extension {kind} ({name}): {other:?}"),
            }
            let described = matches!(kind, 3 | 18..=23);
            assert_eq!(m.settled_for_good(), described, "{kind}: remembered only when nothing in it can change");
        }
        // A plain Token-2022 mint and one with metadata are settled, and remembered.
        let plain = parse_mint(&TOKEN_2022_PROGRAM, &mint_2022(&base, &[])).unwrap();
        assert!(plain.refusal().is_none() && plain.settled_for_good() && plain.extensions.is_empty());
        let described = mint_2022_with_metadata(&base, &key, "Tollgate Dollar", "TGD");
        let described = parse_mint(&TOKEN_2022_PROGRAM, &described).unwrap();
        assert!(described.refusal().is_none() && described.settled_for_good());
        // The first reason is given, whatever follows.
        let both = mint_2022(&base, &[(9, vec![]), (26, vec![0; 33])]);
        assert!(parse_mint(&TOKEN_2022_PROGRAM, &both).unwrap().refusal().unwrap().contains("cannot be transferred"));
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

    /// Writes an account straight into the embedded ledger.
    fn set_account(
        ledger: &crate::chains::solana::embedded::EmbeddedLedger,
        address: &Pubkey,
        owner: &Pubkey,
        data: &[u8],
    ) {
        let account = solana_sdk::account::Account {
            lamports: 10_000_000,
            data: data.to_vec(),
            owner: *owner,
            ..Default::default()
        };
        ledger.set_account(*address, account).unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn token_info_reads_mints_from_the_ledger() {
        use crate::chains::solana::embedded::EmbeddedLedger;
        use crate::chains::solana::rpc::{DEFAULT_CALL_TIMEOUT, SolanaRpc};
        let ledger = EmbeddedLedger::start().await.unwrap();
        let rpc = SolanaRpc::connect(ledger.rpc_url(), DEFAULT_CALL_TIMEOUT).await.unwrap();
        let (spl, t22, authority) = (Pubkey::new_unique(), Pubkey::new_unique(), Pubkey::new_unique());
        set_account(&ledger, &spl, &TOKEN_PROGRAM, &mint_bytes(Some(authority), 21_000_000_000_000, 6, None));
        set_account(&ledger, &metaplex_address(&spl), &METAPLEX_METADATA, &metaplex_bytes(&spl, "Wrapped Thing", "WT"));
        let with_metadata =
            mint_2022_with_metadata(&mint_bytes(None, 42, 9, Some(authority)), &t22, "Tollgate Dollar", "TGD");
        set_account(&ledger, &t22, &TOKEN_2022_PROGRAM, &with_metadata);

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
        set_account(&ledger, &not_a_mint, &TOKEN_PROGRAM, &[0u8; 165]);
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
