//! Wire types shared by every part of Tollgate. No I/O.
//!
//! # Layout
//!
//! * [`amount`]: exact money, [`AtomicAmount`] (integer atomic units) and [`DecimalAmount`]
//!   (JSON numbers in whole units, read from their text).
//! * [`network`]: CAIP-2 [`Network`]s and [`ChainFamily`], with x402 v1 names.
//! * [`address`]: validated EVM / Solana [`Address`]es.
//! * [`x402`]: x402 v1 and v2 messages, the base64 header codec, scheme payloads, and the
//!   extensions (`bazaar`: what a paid route or tool takes and gives, to be found).
//! * [`gateway`]: the gateway API's requests, responses and payment record.
//! * [`error`]: the error envelope and the code → HTTP status table.
//! * [`redact`]: endpoint URLs shown without the credentials they carry.
//! * [`seconds`]: whole numbers of seconds, written `60` or `60.0`.
//! * [`webhook`]: signing webhook deliveries and checking their signature.
//! * [`ticket`]: what one payment buys — the answers a seller serves for it, counted by the
//!   facilitator, and a pass for a period.
//! * [`siwx`]: the `sign-in-with-x` extension: a pass's payer signs in instead of paying again.

pub mod address;
pub mod amount;
pub mod error;
pub mod gateway;
pub mod network;
#[cfg(feature = "openapi")]
mod openapi;
pub mod redact;
pub mod seconds;
pub mod siwx;
pub mod ticket;
pub mod webhook;
pub mod x402;

pub use address::{Address, AddressError};
pub use amount::{AmountError, AtomicAmount, DecimalAmount};
pub use error::{ErrorBody, ErrorCode, ErrorEnvelope};
pub use network::{ChainFamily, Network};
