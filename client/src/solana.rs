//! Paying on Solana: `exact-native` SOL (a System transfer the buyer signs and pays the fee of)
//! and x402 `exact` SPL tokens (a `TransferChecked` whose fee the seller's facilitator pays: the
//! buyer signs as the token owner, the fee payer named in `extra.feePayer` signs later).

use std::collections::HashMap;
use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};
use solana_compute_budget_interface::ComputeBudgetInstruction;
use solana_sdk::instruction::Instruction;
use solana_sdk::pubkey::Pubkey;
use solana_sdk::signature::Keypair;
use solana_sdk::signer::Signer as _;
use solana_sdk::transaction::Transaction;
use tokio::sync::{Mutex, OnceCell};
use tollgate_protocol::x402::schemes::ExactNativePayload;
use tollgate_protocol::x402::{Asset, PaymentRequirements, SCHEME_EXACT, SCHEME_EXACT_NATIVE};
use tollgate_protocol::{Address, ChainFamily, Network};

use tollgate_encoding::solana::{MEMO_PROGRAM, Transfer, associated_token_address, transfer_checked};

use crate::PayError;

/// Least compute units asked for a sponsored token transfer (it uses ~10,000 with Token-2022).
const SPONSORED_COMPUTE_UNITS: u32 = 40_000;
/// Least compute units asked for a native transfer (it uses ~300).
const NATIVE_COMPUTE_UNITS: u32 = 1_000;
/// How far above those a payment's own limit may be (what makes each payment unique; the
/// sponsor's cap of 200,000 units stays clear).
const UNIQUE_UNITS_SPREAD: u32 = 100_000;
/// Priority fee asked of the sponsor, micro-lamports per unit (the minimum that is not zero).
const SPONSORED_COMPUTE_UNIT_PRICE: u64 = 1;

/// A Solana key and the RPC it reads blockhashes and mints from.
pub struct SolanaWallet {
    keypair: Keypair,
    rpc: solana_rpc_client::nonblocking::rpc_client::RpcClient,
    network: OnceCell<Network>,
    /// Mint → (token program, decimals); a mint's decimals never change.
    mints: Mutex<HashMap<Pubkey, (Pubkey, u8)>>,
}

impl std::fmt::Debug for SolanaWallet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SolanaWallet").field("address", &self.keypair.pubkey()).finish_non_exhaustive()
    }
}

/// RPC clients quote the endpoint in their errors, and providers put their key in it.
fn build_error(e: impl std::fmt::Display) -> PayError {
    PayError::Build(tollgate_protocol::redact::redact_urls(&e.to_string()))
}

impl SolanaWallet {
    /// Pays with `keypair`, reading the cluster, recent blockhashes and token mints from
    /// `rpc_url`; only offers on that RPC's cluster are paid.
    #[must_use]
    pub fn new(keypair: Keypair, rpc_url: String) -> Self {
        let rpc = solana_rpc_client::nonblocking::rpc_client::RpcClient::new_with_timeout_and_commitment(
            rpc_url,
            Duration::from_secs(10),
            solana_commitment_config::CommitmentConfig::confirmed(),
        );
        Self { keypair, rpc, network: OnceCell::new(), mints: Mutex::new(HashMap::new()) }
    }

    fn own_address(&self) -> String {
        self.keypair.pubkey().to_string()
    }

    /// The cluster the RPC serves, from its genesis hash (asked once).
    async fn network(&self) -> Result<&Network, PayError> {
        self.network
            .get_or_try_init(|| async {
                let genesis = self.rpc.get_genesis_hash().await.map_err(build_error)?;
                Ok(Network::solana_from_genesis(&genesis.to_string()))
            })
            .await
    }

    /// The decimals of what `requirement` asks for when this wallet can pay it, `None` when it
    /// cannot (another chain or cluster, another scheme, an `exact` offer without fee payer).
    async fn read_decimals(&self, requirement: &PaymentRequirements) -> Result<Option<u8>, PayError> {
        if requirement.network.family() != ChainFamily::Solana
            || !matches!(requirement.pay_to, Address::Solana(_))
            || &requirement.network != self.network().await?
        {
            return Ok(None);
        }
        match (requirement.scheme.as_str(), requirement.asset) {
            (SCHEME_EXACT_NATIVE, Asset::Native) => Ok(Some(ChainFamily::Solana.native_decimals())),
            (SCHEME_EXACT, Asset::Token(Address::Solana(mint))) if fee_payer(requirement).is_some() => {
                Ok(Some(self.mint(&Pubkey::new_from_array(mint)).await?.1))
            }
            _ => Ok(None),
        }
    }

    /// The token program that owns `mint`, and its decimals.
    async fn mint(&self, mint: &Pubkey) -> Result<(Pubkey, u8), PayError> {
        if let Some(known) = self.mints.lock().await.get(mint) {
            return Ok(*known);
        }
        let account = self.rpc.get_account(mint).await.map_err(|e| build_error(format!("mint {mint}: {e}")))?;
        let Some(decimals) = tollgate_encoding::solana::mint_decimals(&account.owner, &account.data) else {
            return Err(build_error(format!("{mint} is not an SPL token mint")));
        };
        let found = (account.owner, decimals);
        self.mints.lock().await.insert(*mint, found);
        Ok(found)
    }

    /// Builds and signs the proof for `requirement` (which [`Self::decimals`] accepted): the
    /// scheme payload and the transaction's id.
    pub(crate) async fn pay(&self, requirement: &PaymentRequirements) -> Result<(Value, Option<String>), PayError> {
        let Address::Solana(to) = requirement.pay_to else {
            return Err(build_error("payTo is not a Solana address"));
        };
        let to = Pubkey::new_from_array(to);
        let amount = u64::try_from(requirement.amount.get()).map_err(|_| build_error("amount too large"))?;
        let blockhash = self.rpc.get_latest_blockhash().await.map_err(build_error)?;
        let me = self.keypair.pubkey();
        // Two payments of the same amount to the same seller within one blockhash would be the
        // same transaction (signatures are deterministic). A compute-unit limit of its own makes
        // each one unique: the budget program is built in, so this costs the ledger next to
        // nothing (a memo, which runs a program, doubles the embedded ledger's time per payment),
        // and without a unit price it does not change the fee.

        if let Asset::Token(Address::Solana(mint)) = requirement.asset {
            let mint = Pubkey::new_from_array(mint);
            let fee_payer = fee_payer(requirement).ok_or_else(|| build_error("extra.feePayer is missing"))?;
            let (program, decimals) = self.mint(&mint).await?;
            let (source, destination) =
                (associated_token_address(&me, &mint, &program), associated_token_address(&to, &mint, &program));
            let transfer = transfer_checked(&program, (&source, &mint, &destination), &me, (amount, decimals));
            let units = SPONSORED_COMPUTE_UNITS + crate::unique_below(UNIQUE_UNITS_SPREAD);
            let mut instructions = vec![
                ComputeBudgetInstruction::set_compute_unit_limit(units),
                ComputeBudgetInstruction::set_compute_unit_price(SPONSORED_COMPUTE_UNIT_PRICE),
                transfer,
            ];
            // x402 `exact`: the memo the seller asks for (an order id, say) travels with the
            // transfer, in a Memo instruction that names no account.
            if let Some(memo) = requirement.extra.as_ref().and_then(|e| e.get("memo")).and_then(Value::as_str) {
                instructions.push(Instruction::new_with_bytes(MEMO_PROGRAM, memo.as_bytes(), vec![]));
            }
            // The fee payer's signature slot stays empty: the facilitator fills it when it settles.
            let mut tx = Transaction::new_with_payer(&instructions, Some(&fee_payer));
            tx.try_partial_sign(&[&self.keypair], blockhash).map_err(build_error)?;
            let id = tx.signatures.get(1).map(ToString::to_string);
            return Ok((json!({ "transaction": encode(&tx)? }), id));
        }

        let units = NATIVE_COMPUTE_UNITS + crate::unique_below(UNIQUE_UNITS_SPREAD);
        let transfer = Transfer { from: me, to, lamports: amount, priority_fee: None };
        let tx = Transaction::new(&[&self.keypair], transfer.message_with_limit(&blockhash, Some(units)), blockhash);
        let id = tx.signatures.first().map(ToString::to_string);
        Ok((ExactNativePayload::Transaction(encode(&tx)?).to_value(), id))
    }
}

/// Base64 of the transaction's wire form.
fn encode(tx: &Transaction) -> Result<String, PayError> {
    Ok(base64::engine::general_purpose::STANDARD.encode(bincode::serialize(tx).map_err(build_error)?))
}

/// The fee payer an `exact` offer names in `extra.feePayer`.
fn fee_payer(requirement: &PaymentRequirements) -> Option<Pubkey> {
    requirement.extra.as_ref()?.get("feePayer")?.as_str()?.parse().ok()
}

#[async_trait::async_trait]
impl crate::Wallet for SolanaWallet {
    fn family(&self) -> tollgate_protocol::ChainFamily {
        tollgate_protocol::ChainFamily::Solana
    }

    fn address(&self) -> String {
        self.own_address()
    }

    async fn decimals(&self, requirement: &PaymentRequirements) -> Result<Option<u8>, PayError> {
        self.read_decimals(requirement).await
    }

    /// ed25519 over the message's bytes, base58.
    async fn sign_message(&self, message: &str) -> Result<String, PayError> {
        Ok(self.keypair.sign_message(message.as_bytes()).to_string())
    }

    /// SOL for the native currency; an SPL mint keeps no symbol on chain (metadata programs
    /// are not read), so a cap by symbol never takes an SPL offer.
    async fn symbol(&self, requirement: &PaymentRequirements) -> Option<String> {
        (requirement.asset == Asset::Native).then(|| ChainFamily::Solana.native_symbol().to_owned())
    }

    async fn prove(
        &self,
        requirement: &PaymentRequirements,
        _declared: &serde_json::Map<String, Value>,
    ) -> Result<crate::Proof, PayError> {
        Ok(crate::Proof::of(self.pay(requirement).await?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A port nothing listens on: bound, then closed.
    fn closed_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map_or(1, |a| a.port())
    }

    #[tokio::test]
    async fn an_unreachable_rpc_is_reported_without_its_key() {
        let port = closed_port();
        let wallet = SolanaWallet::new(Keypair::new(), format!("http://127.0.0.1:{port}/?api-key=SECRETKEY"));
        let Err(PayError::Build(message)) = wallet.network().await else { panic!("a closed port cannot answer") };
        assert!(!message.contains("SECRETKEY"), "{message}");
        assert!(!format!("{wallet:?}").contains("SECRETKEY"));
    }
}
