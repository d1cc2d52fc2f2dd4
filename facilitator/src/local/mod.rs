//! Local mode: the facilitator builds unsigned transactions; the caller signs and broadcasts them
//! with their own wallet and RPC, then reports the signature so status and history cover them.

pub mod solana;
