//! Helpers for local development chains (the embedded Solana ledger, anvil): tokens to pay with
//! and funded accounts. The demo and the end-to-end tests use them; a real network never sees
//! them except through the keys they are handed.
//!
//! Tokens are made with the chains' real programs: on Solana the Token and Associated Token
//! Account programs; on EVM the contracts of `contracts/` (an ERC-20 with EIP-3009, a plain one,
//! one with EIP-2612; [`TokenKind`]) whose compiled bytecode is committed
//! (`scripts/compile-contracts` rebuilds it). [`install_permit2`] puts the real Permit2 and the
//! x402 Permit2 proxies at their canonical addresses on an anvil, [`install_batch_settlement`]
//! x402's `batch-settlement` contract and its deposit collectors.

use std::time::Duration;

use alloy::primitives::{Address as EvmAddress, TxKind, U256};
use alloy::providers::Provider as _;
use alloy::signers::local::PrivateKeySigner;
use alloy::sol_types::{SolCall as _, SolValue as _};
use solana_sdk::instruction::{AccountMeta, Instruction};
use solana_sdk::pubkey::Pubkey;
use solana_sdk::signature::Keypair;
use solana_sdk::signer::Signer as _;
use solana_sdk::transaction::Transaction;

use crate::chains::evm::rpc::EvmRpc;
use crate::chains::solana::rpc::SolanaRpc;
use crate::chains::solana::spl::{ASSOCIATED_TOKEN_PROGRAM, associated_token_address};
use crate::chains::solana::token::TOKEN_PROGRAM;
use crate::chains::{ChainError, TxOutcome};

/// How long a helper waits for its own transaction.
const WAIT: Duration = Duration::from_secs(30);

/// The compiled `TollgateTestToken` (constructor: name, symbol, decimals; EIP-712 version "2").
pub const TEST_TOKEN_BYTECODE: &str = include_str!("../contracts/build/TollgateTestToken_sol_TollgateTestToken.bin");
/// The compiled `TollgatePlainToken` (a plain ERC-20; constructor: name, symbol, decimals).
pub const PLAIN_TOKEN_BYTECODE: &str = include_str!("../contracts/build/TollgatePlainToken_sol_TollgatePlainToken.bin");
/// The compiled `TollgatePermitToken` (an ERC-20 with EIP-2612; constructor: name, symbol, decimals).
pub const PERMIT_TOKEN_BYTECODE: &str =
    include_str!("../contracts/build/TollgatePlainToken_sol_TollgatePermitToken.bin");
/// The compiled x402 exact Permit2 proxy (constructor: Permit2's address).
pub const EXACT_PROXY_BYTECODE: &str =
    include_str!("../contracts/build/X402Permit2Proxies_sol_X402ExactPermit2Proxy.bin");
/// The compiled x402 upto Permit2 proxy (constructor: Permit2's address).
pub const UPTO_PROXY_BYTECODE: &str =
    include_str!("../contracts/build/X402Permit2Proxies_sol_X402UptoPermit2Proxy.bin");
/// The compiled `x402BatchSettlement` (no constructor arguments, no immutables).
pub const BATCH_SETTLEMENT_BYTECODE: &str =
    include_str!("../contracts/build/X402BatchSettlement_sol_X402BatchSettlement.bin");
/// The compiled ERC-3009 deposit collector of `batch-settlement` (no constructor arguments).
pub const ERC3009_COLLECTOR_BYTECODE: &str =
    include_str!("../contracts/build/X402BatchSettlement_sol_ERC3009DepositCollector.bin");
/// The compiled Permit2 deposit collector of `batch-settlement` (no constructor arguments).
pub const PERMIT2_COLLECTOR_BYTECODE: &str =
    include_str!("../contracts/build/X402BatchSettlement_sol_Permit2DepositCollector.bin");
/// The compiled `TollgateTestWallet` (an EIP-1271 contract wallet; constructor: owner).
pub const TEST_WALLET_BYTECODE: &str = include_str!("../contracts/build/TollgateTestWallet_sol_TollgateTestWallet.bin");

alloy::sol! {
    /// The test token's minting entry point.
    interface TestToken {
        function mint(address to, uint256 value) external;
    }
}

/// The anvil binary for tests and the demo: `TOLLGATE_ANVIL` (when not empty, as `scripts/test`
/// reads it), or where `scripts/test` installs it (`.tools/anvil/` at the workspace root, from
/// the npm package `@foundry-rs/anvil-linux-amd64`).
///
/// # Errors
/// When neither exists, saying how to install it.
pub fn anvil_binary() -> Result<std::path::PathBuf, ChainError> {
    if let Some(path) = std::env::var_os("TOLLGATE_ANVIL").filter(|p| !p.is_empty()) {
        return Ok(std::path::PathBuf::from(path));
    }
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../.tools/anvil/node_modules/@foundry-rs/anvil-linux-amd64/bin/anvil");
    if !path.exists() {
        return Err(ChainError(format!(
            "anvil is not installed at {}: run scripts/test (it installs it), or set TOLLGATE_ANVIL",
            path.display()
        )));
    }
    Ok(path)
}

fn failed(what: &str, outcome: Option<TxOutcome>) -> ChainError {
    ChainError(format!("{what} did not confirm: {outcome:?}"))
}

/// Signs and sends `instructions` paid by `payer`, and waits until they are confirmed; the
/// transaction's signature.
///
/// # Errors
/// [`ChainError`] when the ledger refuses or fails the transaction.
pub async fn send_solana(
    rpc: &SolanaRpc,
    payer: &Keypair,
    signers: &[&Keypair],
    instructions: &[Instruction],
) -> Result<solana_sdk::signature::Signature, ChainError> {
    let (blockhash, _) = rpc.latest_blockhash().await?;
    let mut all = vec![payer];
    all.extend_from_slice(signers);
    let tx = Transaction::new_signed_with_payer(instructions, Some(&payer.pubkey()), &all, blockhash);
    let signature = rpc.send(&tx).await.map_err(|e| ChainError(e.to_string()))?;
    match rpc.wait_for_outcome(&signature, WAIT).await? {
        Some(TxOutcome::Confirmed { .. }) => Ok(signature),
        other => Err(failed("a Solana transaction", other)),
    }
}

/// An SPL token (Token program) on a local ledger, whose mint authority is `authority`.
#[derive(Debug)]
pub struct SplDevToken {
    /// Pays for accounts and holds the mint authority.
    pub authority: Keypair,
    /// The mint.
    pub mint: Pubkey,
    /// Its decimals.
    pub decimals: u8,
}

impl SplDevToken {
    /// Creates a mint with `decimals`; `authority` must hold SOL (for rent and fees).
    ///
    /// # Errors
    /// [`ChainError`] when the ledger refuses.
    pub async fn create(rpc: &SolanaRpc, authority: Keypair, decimals: u8) -> Result<Self, ChainError> {
        let mint = Keypair::new();
        let create = solana_system_interface::instruction::create_account(
            &authority.pubkey(),
            &mint.pubkey(),
            10_000_000,
            82,
            &TOKEN_PROGRAM,
        );
        // InitializeMint2: tag 20, decimals, mint authority, no freeze authority.
        let mut data = vec![20, decimals];
        data.extend_from_slice(authority.pubkey().as_ref());
        data.push(0);
        let init = Instruction::new_with_bytes(TOKEN_PROGRAM, &data, vec![AccountMeta::new(mint.pubkey(), false)]);
        send_solana(rpc, &authority, &[&mint], &[create, init]).await?;
        Ok(Self { authority, mint: mint.pubkey(), decimals })
    }

    /// Creates `owner`'s associated token account when missing, and mints `amount` base units
    /// into it; returns the account.
    ///
    /// # Errors
    /// [`ChainError`] when the ledger refuses.
    pub async fn fund(&self, rpc: &SolanaRpc, owner: &Pubkey, amount: u64) -> Result<Pubkey, ChainError> {
        let ata = associated_token_address(owner, &self.mint, &TOKEN_PROGRAM);
        // CreateIdempotent (tag 1).
        let mut instructions = vec![Instruction::new_with_bytes(
            ASSOCIATED_TOKEN_PROGRAM,
            &[1],
            vec![
                AccountMeta::new(self.authority.pubkey(), true),
                AccountMeta::new(ata, false),
                AccountMeta::new_readonly(*owner, false),
                AccountMeta::new_readonly(self.mint, false),
                AccountMeta::new_readonly(solana_system_interface::program::ID, false),
                AccountMeta::new_readonly(TOKEN_PROGRAM, false),
            ],
        )];
        if amount > 0 {
            // MintTo (tag 7).
            let mut data = vec![7];
            data.extend_from_slice(&amount.to_le_bytes());
            instructions.push(Instruction::new_with_bytes(
                TOKEN_PROGRAM,
                &data,
                vec![
                    AccountMeta::new(self.mint, false),
                    AccountMeta::new(ata, false),
                    AccountMeta::new_readonly(self.authority.pubkey(), true),
                ],
            ));
        }
        send_solana(rpc, &self.authority, &[], &instructions).await?;
        Ok(ata)
    }

    /// Base units held by `owner`'s associated token account (0 when it has none).
    ///
    /// # Errors
    /// [`ChainError`] when the ledger cannot be read.
    pub async fn balance_of(&self, rpc: &SolanaRpc, owner: &Pubkey) -> Result<u64, ChainError> {
        let ata = associated_token_address(owner, &self.mint, &TOKEN_PROGRAM);
        Ok(rpc
            .account(&ata)
            .await?
            .and_then(|(_, data)| data.get(64..72).and_then(|b| b.try_into().ok()))
            .map_or(0, u64::from_le_bytes))
    }
}

/// Sets an account's balance on a development node (`anvil_setBalance`, which Hardhat also
/// answers as `hardhat_setBalance`).
///
/// # Errors
/// [`ChainError`] when the node is not a development node or fails.
pub async fn set_evm_balance(rpc: &EvmRpc, address: EvmAddress, wei: U256) -> Result<(), ChainError> {
    let _: serde_json::Value = rpc
        .provider()
        .raw_request("anvil_setBalance".into(), (address, wei))
        .await
        .map_err(|e| ChainError(format!("anvil_setBalance: {e}")))?;
    Ok(())
}

/// Sends a transaction from `from` (gas 3,000,000, current fees) and waits for its receipt;
/// returns the created contract's address for a deployment.
///
/// # Errors
/// [`ChainError`] when it is refused or reverts.
pub async fn send_evm(
    rpc: &EvmRpc,
    from: &PrivateKeySigner,
    to: TxKind,
    input: Vec<u8>,
) -> Result<Option<EvmAddress>, ChainError> {
    let fees = rpc.fees().await?;
    let tx = alloy::consensus::TxEip1559 {
        chain_id: rpc.chain_id(),
        nonce: rpc.pending_nonce(from.address()).await?,
        gas_limit: 3_000_000,
        max_fee_per_gas: fees.max_fee_per_gas,
        max_priority_fee_per_gas: fees.max_priority_fee_per_gas,
        to,
        value: U256::ZERO,
        access_list: Default::default(),
        input: input.into(),
    };
    let (raw, hash) = crate::chains::evm::build::sign(tx, from).map_err(|e| ChainError(e.to_string()))?;
    rpc.send_raw(&raw).await.map_err(|e| ChainError(e.to_string()))?;
    match rpc.wait_for_outcome(hash, WAIT).await? {
        Some(TxOutcome::Confirmed { .. }) => {}
        other => return Err(failed("an EVM transaction", other)),
    }
    let receipt = rpc.receipt(hash).await?.ok_or_else(|| ChainError(format!("no receipt for {hash}")))?;
    Ok(receipt.contract_address)
}

/// Which test token to deploy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenKind {
    /// `TollgateTestToken`: an ERC-20 with EIP-3009 (EIP-712 version "2").
    Eip3009,
    /// `TollgatePlainToken`: a plain ERC-20, paid through Permit2 only.
    Plain,
    /// `TollgatePermitToken`: an ERC-20 with EIP-2612 `permit` (EIP-712 version "1").
    Eip2612,
}

impl TokenKind {
    fn bytecode(self) -> &'static str {
        match self {
            Self::Eip3009 => TEST_TOKEN_BYTECODE,
            Self::Plain => PLAIN_TOKEN_BYTECODE,
            Self::Eip2612 => PERMIT_TOKEN_BYTECODE,
        }
    }
}

/// A test token deployed on a development node; `minter` deployed it.
#[derive(Debug)]
pub struct DevToken {
    /// The contract.
    pub address: EvmAddress,
    /// Its deployer, the only account that mints.
    pub minter: PrivateKeySigner,
    /// Its decimals.
    pub decimals: u8,
}

impl DevToken {
    /// Deploys a token of `kind` named `name` (`symbol`, `decimals`) from `minter`, which must
    /// hold ETH.
    ///
    /// # Errors
    /// [`ChainError`] when the deployment fails.
    pub async fn deploy(
        rpc: &EvmRpc,
        minter: PrivateKeySigner,
        kind: TokenKind,
        (name, symbol, decimals): (&str, &str, u8),
    ) -> Result<Self, ChainError> {
        let mut code = alloy::primitives::hex::decode(kind.bytecode().trim())
            .map_err(|e| ChainError(format!("test token bytecode: {e}")))?;
        // uint8 is ABI-encoded as one 32-byte word, like uint256.
        code.extend((name.to_owned(), symbol.to_owned(), U256::from(decimals)).abi_encode_params());
        let address = send_evm(rpc, &minter, TxKind::Create, code)
            .await?
            .ok_or_else(|| ChainError("the deployment created no contract".into()))?;
        Ok(Self { address, minter, decimals })
    }

    /// Mints `value` base units to `to`.
    ///
    /// # Errors
    /// [`ChainError`] when the mint fails.
    pub async fn mint(&self, rpc: &EvmRpc, to: EvmAddress, value: U256) -> Result<(), ChainError> {
        let data = TestToken::mintCall { to, value }.abi_encode();
        send_evm(rpc, &self.minter, TxKind::Call(self.address), data).await.map(|_| ())
    }

    /// Base units held by `owner`.
    ///
    /// # Errors
    /// [`ChainError`] when the token cannot be read.
    pub async fn balance_of(&self, rpc: &EvmRpc, owner: EvmAddress) -> Result<U256, ChainError> {
        crate::chains::evm::erc20::balance_of(rpc, self.address, owner).await
    }
}

/// Where `scripts/install-permit2` puts Permit2's published deployment bytecode (the npm package
/// `@uniswap/v4-periphery`, `lib/permit2/test/utils/DeployPermit2.sol`: the runtime code Uniswap
/// places at Permit2's canonical address in tests), or `TOLLGATE_PERMIT2_SOURCE`.
fn permit2_source() -> std::path::PathBuf {
    if let Some(path) = std::env::var_os("TOLLGATE_PERMIT2_SOURCE") {
        return std::path::PathBuf::from(path);
    }
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../.tools/permit2/node_modules/@uniswap/v4-periphery/lib/permit2/test/utils/DeployPermit2.sol")
}

/// Permit2's runtime bytecode, read from its published deployment helper (the one `hex"…"`
/// literal in it).
///
/// # Errors
/// When it is not installed (saying how to), or holds no bytecode.
pub fn permit2_bytecode() -> Result<Vec<u8>, ChainError> {
    let path = permit2_source();
    let source = std::fs::read_to_string(&path).map_err(|e| {
        ChainError(format!(
            "Permit2 is not installed at {} ({e}): run scripts/install-permit2 (scripts/test runs it)",
            path.display()
        ))
    })?;
    let start = source.find("hex\"").ok_or_else(|| ChainError(format!("no bytecode in {}", path.display())))? + 4;
    let len =
        source[start..].find('"').ok_or_else(|| ChainError(format!("unterminated bytecode in {}", path.display())))?;
    alloy::primitives::hex::decode(&source[start..start + len])
        .map_err(|e| ChainError(format!("Permit2's bytecode in {} is not hex: {e}", path.display())))
}

/// Places `code` at `address` (anvil's `anvil_setCode`).
async fn set_code(rpc: &EvmRpc, address: EvmAddress, code: &[u8]) -> Result<(), ChainError> {
    let code = alloy::primitives::hex::encode_prefixed(code);
    let _: serde_json::Value = rpc
        .provider()
        .raw_request("anvil_setCode".into(), (address, code))
        .await
        .map_err(|e| ChainError(format!("anvil_setCode: {e}")))?;
    Ok(())
}

/// Puts the real Permit2 (its published bytecode) and the x402 Permit2 proxies at their
/// canonical addresses on an anvil: each proxy is deployed by `deployer` (which must hold ETH)
/// against Permit2, and its code moved to its address (it keeps no state, so its code is all of it).
///
/// # Errors
/// [`ChainError`] when Permit2 is not installed or a step fails.
pub async fn install_permit2(rpc: &EvmRpc, deployer: &PrivateKeySigner) -> Result<(), ChainError> {
    use tollgate_encoding::permit2::{EXACT_PROXY, PERMIT2, UPTO_PROXY};
    let mut permit2 = permit2_bytecode()?;
    set_code(rpc, PERMIT2, &permit2).await?;
    // Permit2 keeps the EIP-712 domain separator of where it was built (an immutable), and uses
    // it on the chain id it was built for — a development chain's, 31337 like anvil's, but at
    // another address. Where that is this chain, put this chain's separator in its place.
    let wanted = tollgate_encoding::permit2::domain(rpc.chain_id()).separator();
    let kept = permit2_domain_separator(rpc).await?;
    if kept != wanted {
        let at = permit2.windows(32).position(|w| w == kept.as_slice()).ok_or_else(|| {
            ChainError(
                "Permit2's bytecode keeps a domain separator this chain does not use, and not as an immutable".into(),
            )
        })?;
        permit2[at..at + 32].copy_from_slice(wanted.as_slice());
        set_code(rpc, PERMIT2, &permit2).await?;
        if permit2_domain_separator(rpc).await? != wanted {
            return Err(ChainError("Permit2 does not sign in this chain's domain".into()));
        }
    }
    for (bytecode, at) in [(EXACT_PROXY_BYTECODE, EXACT_PROXY), (UPTO_PROXY_BYTECODE, UPTO_PROXY)] {
        place(rpc, deployer, (bytecode, &PERMIT2.abi_encode()), at).await?;
    }
    Ok(())
}

/// Puts x402's `batch-settlement` contract and its ERC-3009 and Permit2 deposit collectors at
/// their canonical addresses on an anvil: each is deployed by `deployer` (which must hold ETH)
/// and its code moved to its address (they keep no immutables, and read their own and each
/// other's addresses as constants). The Permit2 collector needs [`install_permit2`] too.
///
/// # Errors
/// [`ChainError`] when a step fails.
pub async fn install_batch_settlement(rpc: &EvmRpc, deployer: &PrivateKeySigner) -> Result<(), ChainError> {
    use tollgate_encoding::batch::{BATCH_SETTLEMENT, ERC3009_COLLECTOR, PERMIT2_COLLECTOR};
    for (bytecode, at) in [
        (BATCH_SETTLEMENT_BYTECODE, BATCH_SETTLEMENT),
        (ERC3009_COLLECTOR_BYTECODE, ERC3009_COLLECTOR),
        (PERMIT2_COLLECTOR_BYTECODE, PERMIT2_COLLECTOR),
    ] {
        place(rpc, deployer, (bytecode, &[]), at).await?;
    }
    Ok(())
}

/// Deploys `bytecode` (hex, followed by its constructor's `arguments`) from `deployer` and moves
/// the deployed code to `at`: for contracts whose code is all of them (no state, immutables
/// that do not name their own address).
async fn place(
    rpc: &EvmRpc,
    deployer: &PrivateKeySigner,
    (bytecode, arguments): (&str, &[u8]),
    at: EvmAddress,
) -> Result<(), ChainError> {
    let mut code = alloy::primitives::hex::decode(bytecode.trim())
        .map_err(|e| ChainError(format!("the bytecode of the contract for {at}: {e}")))?;
    code.extend_from_slice(arguments);
    let deployed = send_evm(rpc, deployer, TxKind::Create, code)
        .await?
        .ok_or_else(|| ChainError(format!("the deployment of the contract for {at} created no contract")))?;
    set_code(rpc, at, &rpc.code(deployed).await?).await
}

/// The EIP-712 domain separator Permit2 answers with on `rpc`'s chain.
async fn permit2_domain_separator(rpc: &EvmRpc) -> Result<alloy::primitives::B256, ChainError> {
    alloy::sol! {
        interface Permit2Domain {
            function DOMAIN_SEPARATOR() external view returns (bytes32);
        }
    }
    crate::chains::evm::erc20::view(rpc, tollgate_encoding::permit2::PERMIT2, &Permit2Domain::DOMAIN_SEPARATORCall {})
        .await
}
