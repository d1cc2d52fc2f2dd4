//! Helpers for local development chains (the embedded Solana ledger, anvil): tokens to pay with
//! and funded accounts. The demo and the end-to-end tests use them; a real network never sees
//! them except through the keys they are handed.
//!
//! Tokens are made with the chains' real programs: on Solana the Token and Associated Token
//! Account programs; on EVM `contracts/TollgateTestToken.sol`, an ERC-20 with EIP-3009 whose
//! compiled bytecode is committed (`scripts/compile-contracts` rebuilds it).

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
/// The compiled `TollgateTestWallet` (an EIP-1271 contract wallet; constructor: owner).
pub const TEST_WALLET_BYTECODE: &str = include_str!("../contracts/build/TollgateTestWallet_sol_TollgateTestWallet.bin");

alloy::sol! {
    /// The test token's minting entry point.
    interface TestToken {
        function mint(address to, uint256 value) external;
    }
}

/// The anvil binary for tests and the demo: `TOLLGATE_ANVIL`, or where `scripts/test` installs
/// it (`.tools/anvil/` at the workspace root, from the npm package `@foundry-rs/anvil-linux-amd64`).
///
/// # Errors
/// When neither exists, saying how to install it.
pub fn anvil_binary() -> Result<std::path::PathBuf, ChainError> {
    if let Some(path) = std::env::var_os("TOLLGATE_ANVIL") {
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

/// An EIP-3009 token (`TollgateTestToken`) deployed on a development node; `minter` deployed it.
#[derive(Debug)]
pub struct Erc3009DevToken {
    /// The contract.
    pub address: EvmAddress,
    /// Its deployer, the only account that mints.
    pub minter: PrivateKeySigner,
    /// Its decimals.
    pub decimals: u8,
}

impl Erc3009DevToken {
    /// Deploys a token named `name` (`symbol`, `decimals`) from `minter`, which must hold ETH.
    ///
    /// # Errors
    /// [`ChainError`] when the deployment fails.
    pub async fn deploy(
        rpc: &EvmRpc,
        minter: PrivateKeySigner,
        (name, symbol, decimals): (&str, &str, u8),
    ) -> Result<Self, ChainError> {
        let mut code = alloy::primitives::hex::decode(TEST_TOKEN_BYTECODE.trim())
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
