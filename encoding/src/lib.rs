//! `tollgate-encoding`: the chain encodings the Tollgate buyer writes and its facilitator reads,
//! written once (no I/O).
//!
//! # Layout
//!
//! | module | what |
//! |---|---|
//! | [`batch`] | x402 `batch-settlement` on EVM: channel configurations and ids, vouchers, claim batches, refunds, the deposit collectors' data, `x402BatchSettlement`'s ABI |
//! | [`evm`] | the ERC-20 / EIP-3009 ABI, EIP-1271, the EIP-712 `TransferWithAuthorization` message and its domain |
//! | [`permit2`] | Permit2 and the x402 proxies: addresses, the signed `PermitWitnessTransferFrom` of `exact` and `upto`, the proxies' ABI, EIP-2612 |
//! | `solana` (feature `solana`, default) | SPL program ids, associated token addresses, `TransferChecked`, native SOL transfer messages |

pub mod batch;
pub mod evm;
pub mod permit2;
#[cfg(feature = "solana")]
pub mod solana;
