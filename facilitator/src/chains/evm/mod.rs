//! EVM chains: one JSON-RPC code path ([`rpc::EvmRpc`], alloy) for every configured chain, native
//! ETH transfers and their receipts ([`build`]), proof checks ([`verify`]), and per-account nonces
//! ([`nonce`]).

pub mod build;
pub mod erc20;
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
    /// Highest max fee per gas the facilitator's own transactions may pay, wei.
    pub max_fee_per_gas: u128,
    /// The facilitator's account, which sends EIP-3009 settlements; `None` disables x402 `exact`.
    pub signer: Option<FacilitatorSigner>,
}

/// The facilitator's own EVM key (its `Debug` shows only the address).
pub struct FacilitatorSigner(pub alloy::signers::local::PrivateKeySigner);

impl std::fmt::Debug for FacilitatorSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("FacilitatorSigner").field(&self.0.address()).finish()
    }
}

impl EvmBackend {
    /// A backend over `rpc`: one confirmation, 500,000 gas, 500 gwei at most, no signer.
    #[must_use]
    pub fn new(rpc: rpc::EvmRpc) -> Self {
        Self {
            rpc,
            nonces: nonce::NonceManager::default(),
            confirmations: 1,
            max_gas: 500_000,
            max_fee_per_gas: 500_000_000_000,
            signer: None,
        }
    }

    /// The same backend, settling x402 `exact` from `signer`'s account.
    #[must_use]
    pub fn with_signer(mut self, signer: alloy::signers::local::PrivateKeySigner) -> Self {
        self.signer = Some(FacilitatorSigner(signer));
        self
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
