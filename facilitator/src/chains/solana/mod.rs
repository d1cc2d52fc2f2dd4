//! Solana: one JSON-RPC code path ([`rpc::SolanaRpc`]) for devnet, mainnet and the embedded
//! ledger ([`embedded::EmbeddedLedger`]), plus building and signing native transfers
//! ([`build`]).

pub mod build;
#[cfg(feature = "embedded-ledger")]
pub mod embedded;
pub mod rpc;
pub mod spl;
pub mod token;
pub mod verify;

/// Lamports in one SOL.
pub const LAMPORTS_PER_SOL: u64 = 1_000_000_000;
