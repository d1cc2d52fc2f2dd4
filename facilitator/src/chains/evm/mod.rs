//! EVM chains: one JSON-RPC code path ([`rpc::EvmRpc`], alloy) for every configured chain, native
//! ETH transfers and their receipts ([`build`]), proof checks ([`verify`]), and per-account nonces
//! ([`nonce`]).

pub mod build;
pub mod nonce;
pub mod rpc;
pub mod verify;

/// Wei in one ETH.
pub const WEI_PER_ETH: u128 = 1_000_000_000_000_000_000;

/// An EVM chain served by this daemon.
#[derive(Debug)]
pub struct EvmBackend {
    /// Its RPC.
    pub rpc: rpc::EvmRpc,
    /// Nonces of the accounts the facilitator signs for.
    pub nonces: nonce::NonceManager,
    /// Blocks a receipt's transaction must be buried under (1 = mined).
    pub confirmations: u64,
    /// Most gas a transaction built or broadcast here may use.
    pub max_gas: u64,
}

impl EvmBackend {
    /// A backend over `rpc` with one confirmation and a 500,000 gas cap.
    #[must_use]
    pub fn new(rpc: rpc::EvmRpc) -> Self {
        Self { rpc, nonces: nonce::NonceManager::default(), confirmations: 1, max_gas: 500_000 }
    }
}

/// The alloy address of a validated EVM address.
#[must_use]
pub fn address(a: &tollgate_protocol::Address) -> Option<alloy::primitives::Address> {
    match a {
        tollgate_protocol::Address::Evm(bytes) => Some(alloy::primitives::Address::from(*bytes)),
        tollgate_protocol::Address::Solana(_) => None,
    }
}

/// The protocol form (EIP-55 when displayed) of an alloy address.
#[must_use]
pub fn protocol_address(a: alloy::primitives::Address) -> tollgate_protocol::Address {
    tollgate_protocol::Address::Evm(a.into_array())
}
