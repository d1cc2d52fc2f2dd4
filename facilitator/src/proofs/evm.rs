//! EVM proofs, checked against [`Terms`] and the chain.
//!
//! | scheme | payload | checked by |
//! |---|---|---|
//! | `exact-native` | `0x`-hex signed EIP-1559 transfer | [`verify::check_signed_transfer`], nonce not used, balance |
//! | `exact-native` | receipt | the sender's EIP-191 signature; the mined transaction, its sender and confirmations |
//! | `exact` | EIP-3009 authorization | recipient, exact value, validity window, EIP-712 signature (EIP-1271 for contract wallets), balance, unused nonce, simulation |
//!
//! An `exact` payment settles by the facilitator's own account calling
//! `transferWithAuthorization` ([`send_call`]); its identity is (chain, token, payer, nonce).

use alloy::consensus::TxEip1559;
use alloy::primitives::{Address, B256, Bytes, Signature, TxKind, U256};
use alloy::rpc::types::TransactionRequest;
use alloy::sol_types::{Eip712Domain, SolCall as _, SolStruct as _};
use tollgate_protocol::x402::schemes::{ExactEvmPayload, ExactNativePayload, NativeReceipt, receipt_message};
use tollgate_protocol::x402::{Asset, PaymentPayload, SCHEME_EXACT, SCHEME_EXACT_NATIVE};
use tollgate_protocol::{ChainFamily, Network};

use super::{Checked, Settle, Terms};
use crate::AppState;
use crate::chains::evm::erc20::{self, Erc1271, Erc3009, TransferWithAuthorization};
use crate::chains::evm::{EvmBackend, address, build, protocol_address, verify};
use crate::refusal::{ProofError, Reason, Refusal};
use crate::settlement::engine::{SettleError, Settlement, Submitted, submit, wait_for_verdict};
use crate::store::{NewPayment, StoredPayment};

fn refuse(reason: Reason, message: impl Into<String>) -> ProofError {
    ProofError::Refused(Refusal::new(reason, message))
}

/// Proof identity of an EVM payment: network and transaction hash (lowercase hex).
fn proof_id(network: &Network, hash: &B256) -> String {
    format!("{network}:{hash:#x}")
}

/// Checks `payload` against `terms` on `backend`'s chain.
///
/// # Errors
/// [`ProofError::Refused`] for a proof that does not pay as asked; [`ProofError::Chain`] when
/// the chain cannot be read.
pub async fn check(
    backend: &EvmBackend,
    payload: &PaymentPayload,
    terms: &Terms,
    now: i64,
) -> Result<Checked, ProofError> {
    check_for(backend, payload, terms, now, Submitter::Facilitator).await
}

/// Who sends an `exact` (EIP-3009) settlement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Submitter {
    /// The facilitator's own account (hosted mode, x402).
    Facilitator,
    /// The seller's account (local mode): the call is simulated from it.
    Seller(Address),
}

/// [`check`] with the account that will send an `exact` settlement.
///
/// # Errors
/// As [`check`].
pub async fn check_for(
    backend: &EvmBackend,
    payload: &PaymentPayload,
    terms: &Terms,
    now: i64,
    submitter: Submitter,
) -> Result<Checked, ProofError> {
    let network = backend.rpc.network();
    if payload.network() != network {
        return Err(refuse(Reason::InvalidNetwork, format!("the proof pays on {}, not {network}", payload.network())));
    }
    let pay_to = address(&terms.pay_to)
        .ok_or_else(|| refuse(Reason::InvalidPaymentRequirements, "payTo must be an EVM address"))?;
    terms.check_accepted(payload)?;
    let checked = match payload.scheme() {
        SCHEME_EXACT_NATIVE => {
            if terms.asset.is_some_and(|a| a != Asset::Native) {
                return Err(refuse(Reason::InvalidPaymentRequirements, "exact-native pays ETH, but a token is asked"));
            }
            let native = ExactNativePayload::from_value(payload.payload())
                .map_err(|e| refuse(Reason::InvalidPayload, e.to_string()))?;
            match native {
                ExactNativePayload::Transaction(raw) => signed_transfer(backend, &raw, &pay_to, terms).await?,
                ExactNativePayload::Receipt(r) => receipt(backend, &r, &pay_to, terms).await?,
            }
        }
        SCHEME_EXACT => authorization(backend, payload, terms, (&pay_to, now), submitter).await?,
        other => return Err(refuse(Reason::UnsupportedScheme, format!("unsupported scheme {other}"))),
    };
    super::check_accepted_asset(payload, &checked)?;
    Ok(checked)
}

/// A signed transfer: checked without the chain, then its nonce and the sender's balance.
async fn signed_transfer(
    backend: &EvmBackend,
    hex_tx: &str,
    pay_to: &Address,
    terms: &Terms,
) -> Result<Checked, ProofError> {
    let rpc = &backend.rpc;
    let (envelope, raw) = verify::decode(hex_tx)?;
    let t = verify::check_signed_transfer(&envelope, raw, pay_to, rpc.chain_id(), backend.max_gas)?;
    let decimals = ChainFamily::Evm.native_decimals();
    terms.price.check(u128::try_from(t.value).unwrap_or(u128::MAX), decimals, Reason::EvmValue)?;
    let mined_nonce = rpc.mined_nonce(t.from).await?;
    if t.nonce < mined_nonce {
        return Err(refuse(
            Reason::PaymentExpired,
            format!("nonce {} of {} is used already (next is {mined_nonce}); sign a fresh transfer", t.nonce, t.from),
        ));
    }
    let balance = rpc.balance(t.from).await?;
    if balance < t.max_cost {
        return Err(refuse(
            Reason::InsufficientFunds,
            format!("the sender holds {balance} wei; the transaction may cost {}", t.max_cost),
        ));
    }
    Ok(Checked {
        settle: Settle::Transaction { bytes: t.raw, tx_id: format!("{:#x}", t.hash), complete: true, horizon: None },
        proof_id: proof_id(rpc.network(), &t.hash),
        payer: protocol_address(t.from),
        asset: Asset::Native,
        amount: u128::try_from(t.value).unwrap_or(u128::MAX),
        decimals,
        fee: None,
    })
}

/// A receipt: the sender's EIP-191 signature over the payment's terms, and the mined transfer,
/// sent by that sender, with enough confirmations.
async fn receipt(
    backend: &EvmBackend,
    receipt: &NativeReceipt,
    pay_to: &Address,
    terms: &Terms,
) -> Result<Checked, ProofError> {
    let rpc = &backend.rpc;
    let bad = |message: &str| refuse(Reason::NativeReceipt, message);
    let from = address(&receipt.from).ok_or_else(|| bad("receipt.from must be an EVM address"))?;
    if let Some(wanted) = &terms.resource
        && receipt.resource.as_deref() != Some(wanted)
    {
        return Err(bad("the receipt was made for another resource"));
    }
    let hash: B256 = receipt.transaction.parse().map_err(|_| bad("receipt.transaction is not a transaction hash"))?;
    let signature = receipt
        .signature
        .strip_prefix("0x")
        .and_then(|h| alloy::primitives::hex::decode(h).ok())
        .and_then(|b| Signature::try_from(b.as_slice()).ok())
        .ok_or_else(|| bad("receipt.signature is not a 65-byte 0x-hex signature"))?;
    let message = receipt_message(rpc.network(), &receipt.transaction, &terms.pay_to, receipt.resource.as_deref());
    if signature.recover_address_from_msg(message.as_bytes()).ok() != Some(from) {
        return Err(bad("the receipt's signature does not verify for its sender, recipient, network and resource"));
    }
    let mined = rpc.mined(hash).await?.ok_or_else(|| bad("the receipt's transaction is not mined"))?;
    let head = rpc.block_number().await?;
    let confirmations = head.saturating_sub(mined.block) + 1;
    if confirmations < backend.confirmations {
        return Err(refuse(
            Reason::NativeReceipt,
            format!(
                "the receipt's transaction has {confirmations} of the {} confirmations required",
                backend.confirmations
            ),
        ));
    }
    if !mined.success {
        return Err(bad("the receipt's transaction reverted"));
    }
    if mined.from != from {
        return Err(bad("the receipt's sender did not send that transaction"));
    }
    if mined.chain_id.is_some_and(|c| c != rpc.chain_id()) {
        return Err(refuse(Reason::InvalidNetwork, "the receipt's transaction is for another chain"));
    }
    if mined.to != Some(*pay_to) || !mined.input.is_empty() {
        return Err(refuse(
            Reason::NativeRecipientMismatch,
            "that transaction is not a plain transfer to walletAddress",
        ));
    }
    let paid = u128::try_from(mined.value).unwrap_or(u128::MAX);
    let decimals = ChainFamily::Evm.native_decimals();
    terms.price.check(paid, decimals, Reason::EvmValue)?;
    Ok(Checked {
        settle: Settle::Confirmed { tx_id: format!("{hash:#x}") },
        proof_id: proof_id(rpc.network(), &hash),
        payer: protocol_address(from),
        asset: Asset::Native,
        amount: paid,
        decimals,
        fee: Some(mined.fee),
    })
}

/// Seconds an EIP-3009 authorization must stay valid after it is checked (x402's margin for the
/// settlement to land).
pub const VALID_BEFORE_MARGIN_SECS: i64 = 6;

/// Proof identity of an EIP-3009 authorization: chain, token, payer and nonce.
fn authorization_id(network: &Network, token: &Address, from: &Address, nonce: &B256) -> String {
    format!("{network}:{token:#x}:{from:#x}:{nonce:#x}")
}

/// The token an `exact` payment moves: the requirement's asset, or the one a v2 payload accepted.
fn exact_token(payload: &PaymentPayload, terms: &Terms) -> Result<Address, ProofError> {
    let asset = match (terms.asset, payload) {
        (Some(asset), _) => asset,
        (None, PaymentPayload::V2(p)) => p.accepted.asset,
        (None, PaymentPayload::V1(_)) => {
            return Err(refuse(
                Reason::InvalidPaymentRequirements,
                "an x402 exact payment on EVM must name its token: send a v2 payload (accepted.asset)",
            ));
        }
    };
    match asset {
        Asset::Token(token) => address(&token)
            .ok_or_else(|| refuse(Reason::InvalidPaymentRequirements, "the asset must be an EVM token contract")),
        Asset::Native => Err(refuse(Reason::InvalidPaymentRequirements, "x402 exact on EVM pays a token, not ETH")),
    }
}

/// The EIP-712 domain of `token`: name and version from the requirement's `extra` (or a v2
/// payload's), else read from the contract.
async fn domain_of(
    backend: &EvmBackend,
    token: Address,
    payload: &PaymentPayload,
    terms: &Terms,
) -> Result<Eip712Domain, ProofError> {
    let extra = terms.extra.as_ref().or(match payload {
        PaymentPayload::V2(p) => p.accepted.extra.as_ref(),
        PaymentPayload::V1(_) => None,
    });
    let given = |field: &str| extra.and_then(|e| e.get(field)).and_then(|v| v.as_str()).map(str::to_owned);
    let rpc = &backend.rpc;
    let name = match given("name") {
        Some(n) => n,
        None => erc20::view(rpc, token, &Erc3009::nameCall {}).await.map_err(|_| {
            refuse(Reason::InvalidPaymentRequirements, "extra.name is needed: the token does not publish its name")
        })?,
    };
    let version = match given("version") {
        Some(v) => v,
        None => erc20::view(rpc, token, &Erc3009::versionCall {}).await.map_err(|_| {
            refuse(Reason::InvalidPaymentRequirements, "extra.version is needed: the token does not publish it")
        })?,
    };
    Ok(Eip712Domain::new(Some(name.into()), Some(version.into()), Some(U256::from(rpc.chain_id())), Some(token), None))
}

/// An EIP-3009 authorization: everything `transferWithAuthorization` would check, checked first.
async fn authorization(
    backend: &EvmBackend,
    payload: &PaymentPayload,
    terms: &Terms,
    (pay_to, now): (&Address, i64),
    submitter: Submitter,
) -> Result<Checked, ProofError> {
    let rpc = &backend.rpc;
    let sender = match (submitter, &backend.signer) {
        (Submitter::Seller(seller), _) => seller,
        (Submitter::Facilitator, Some(signer)) => signer.0.address(),
        (Submitter::Facilitator, None) => {
            return Err(refuse(
                Reason::UnsupportedScheme,
                format!("this facilitator has no account to settle x402 exact on {}", rpc.network()),
            ));
        }
    };
    let p =
        ExactEvmPayload::from_value(payload.payload()).map_err(|e| refuse(Reason::InvalidPayload, e.to_string()))?;
    let token = exact_token(payload, terms)?;
    let a = &p.authorization;
    let (Some(from), Some(to)) = (address(&a.from), address(&a.to)) else {
        return Err(refuse(Reason::InvalidPayload, "authorization addresses must be EVM addresses"));
    };
    if to != *pay_to {
        return Err(refuse(Reason::EvmRecipientMismatch, format!("the authorization pays {to}, not {pay_to}")));
    }
    let decimals = erc20::view(rpc, token, &Erc3009::decimalsCall {}).await.map_err(|_| {
        refuse(Reason::InvalidPaymentRequirements, format!("{token} does not answer as an ERC-20 token"))
    })?;
    terms.price.check(a.value.get(), decimals, Reason::EvmValue)?;
    let (valid_after, valid_before) = (a.valid_after.get(), a.valid_before.get());
    if valid_after >= u128::try_from(now).unwrap_or_default() {
        return Err(refuse(Reason::EvmValidAfter, format!("the authorization is valid only after {valid_after}")));
    }
    if valid_before < u128::try_from(now + VALID_BEFORE_MARGIN_SECS).unwrap_or_default() {
        return Err(refuse(
            Reason::EvmValidBefore,
            format!("the authorization expires at {valid_before}, too soon to settle"),
        ));
    }
    let nonce: B256 =
        a.nonce.parse().map_err(|_| refuse(Reason::InvalidPayload, "authorization.nonce is not 32 bytes"))?;
    let signature = alloy::primitives::hex::decode(p.signature.trim_start_matches("0x"))
        .map_err(|_| refuse(Reason::EvmSignature, "the signature is not hex"))?;
    let value = U256::from(a.value.get());
    let message = TransferWithAuthorization {
        from,
        to,
        value,
        validAfter: U256::from(valid_after),
        validBefore: U256::from(valid_before),
        nonce,
    };
    let digest = message.eip712_signing_hash(&domain_of(backend, token, payload, terms).await?);
    if !rpc.code(from).await?.is_empty() {
        // A contract wallet: it decides (EIP-1271).
        let answer = erc20::view(
            rpc,
            from,
            &Erc1271::isValidSignatureCall { hash: digest, signature: signature.clone().into() },
        )
        .await
        .ok();
        if answer.map(|b| b.0) != Some(erc20::ERC1271_MAGIC) {
            return Err(refuse(Reason::EvmSignature, "the payer's wallet contract does not accept the signature"));
        }
    } else {
        let recovered = Signature::try_from(signature.as_slice())
            .ok()
            .filter(|s| s.normalize_s().is_none())
            .and_then(|s| s.recover_address_from_prehash(&digest).ok());
        if recovered != Some(from) {
            return Err(refuse(Reason::EvmSignature, "the signature is not the payer's over this authorization"));
        }
    }
    if erc20::balance_of(rpc, token, from).await? < value {
        return Err(refuse(Reason::InsufficientFunds, format!("{from} holds less than {value} of {token}")));
    }
    if erc20::authorization_used(rpc, token, from, nonce).await? {
        return Err(refuse(Reason::EvmNonceUsed, "this authorization's nonce is used already"));
    }
    let data = Erc3009::transferWithAuthorizationCall {
        from,
        to,
        value,
        validAfter: message.validAfter,
        validBefore: message.validBefore,
        nonce,
        signature: signature.into(),
    }
    .abi_encode();
    let request = TransactionRequest::default().from(sender).to(token).input(Bytes::from(data.clone()).into());
    let gas = rpc
        .estimate_gas(request)
        .await
        .map_err(|e| refuse(Reason::EvmSimulationFailed, format!("transferWithAuthorization would fail: {e}")))?;
    // Margin over the estimate, within the cap.
    let gas_limit = gas.saturating_add(gas / 5).min(backend.max_gas);
    if gas > backend.max_gas {
        return Err(refuse(Reason::EvmSimulationFailed, format!("the settlement needs {gas} gas, above the cap")));
    }
    Ok(Checked {
        settle: Settle::Call { to: protocol_address(token), data, gas_limit },
        proof_id: authorization_id(rpc.network(), &token, &from, &nonce),
        payer: protocol_address(from),
        asset: Asset::Token(protocol_address(token)),
        amount: a.value.get(),
        decimals,
        fee: None,
    })
}

/// Sends a checked contract call from the facilitator's account and settles `payment` with it:
/// the account's nonce is held from reading it until the broadcast; the engine claims the proof,
/// writes the hash ahead, broadcasts, and waits at most `wait`.
///
/// # Errors
/// [`SettleError::AlreadyClaimed`] for a proof used before; [`SettleError::Chain`] when the
/// transaction cannot be built (node down, gas above the cap); storage failures.
pub async fn send_call(
    state: &AppState,
    backend: &EvmBackend,
    payment: NewPayment,
    (to, data, gas_limit): (tollgate_protocol::Address, Vec<u8>, u64),
    wait: std::time::Duration,
) -> Result<StoredPayment, SettleError> {
    let rpc = &backend.rpc;
    let chain = |e: crate::chains::ChainError| SettleError::Chain(e.0);
    let signer =
        backend.signer.as_ref().ok_or_else(|| SettleError::Chain("no facilitator account on this chain".into()))?;
    let to = address(&to).ok_or_else(|| SettleError::Chain("the call's target is not an EVM address".into()))?;
    let fees = rpc.fees().await.map_err(chain)?;
    if fees.max_fee_per_gas > backend.max_fee_per_gas {
        return Err(SettleError::Chain(format!(
            "gas costs {} wei, above the {} wei this facilitator pays; try again later",
            fees.max_fee_per_gas, backend.max_fee_per_gas
        )));
    }
    let lease = backend.nonces.lease(rpc, signer.0.address()).await.map_err(chain)?;
    let tx = TxEip1559 {
        chain_id: rpc.chain_id(),
        nonce: lease.nonce(),
        gas_limit,
        max_fee_per_gas: fees.max_fee_per_gas,
        max_priority_fee_per_gas: fees.max_priority_fee_per_gas,
        to: TxKind::Call(to),
        value: U256::ZERO,
        access_list: Default::default(),
        input: data.into(),
    };
    let (tx_bytes, hash) = build::sign(tx, &signer.0).map_err(|e| SettleError::Encode(e.to_string()))?;
    let tx_id = format!("{hash:#x}");
    let settlement = Settlement { payment, tx_id: tx_id.clone(), tx_bytes, wait };
    match submit(&*state.store, &*state.clock, rpc, &settlement).await? {
        Submitted::Refused(failed) => Ok(*failed),
        Submitted::Broadcast => {
            lease.used();
            Ok(wait_for_verdict(&*state.store, &*state.clock, rpc, &settlement.payment.id, &tx_id, wait).await?)
        }
    }
}

/// The identity a proof will be claimed under, read without the chain (`None` when the payload
/// is malformed; the full check then says why).
#[must_use]
pub fn proof_identity(payload: &PaymentPayload, asset: Option<Asset>) -> Option<String> {
    if payload.scheme() == SCHEME_EXACT {
        let p = ExactEvmPayload::from_value(payload.payload()).ok()?;
        let asset = asset.or(match payload {
            PaymentPayload::V2(v2) => Some(v2.accepted.asset),
            PaymentPayload::V1(_) => None,
        })?;
        let Asset::Token(token) = asset else { return None };
        let (token, from) = (address(&token)?, address(&p.authorization.from)?);
        return Some(authorization_id(payload.network(), &token, &from, &p.authorization.nonce.parse().ok()?));
    }
    if payload.scheme() != SCHEME_EXACT_NATIVE {
        return None;
    }
    let hash = match ExactNativePayload::from_value(payload.payload()).ok()? {
        ExactNativePayload::Transaction(raw) => *verify::decode(&raw).ok()?.0.tx_hash(),
        ExactNativePayload::Receipt(r) => r.transaction.parse().ok()?,
    };
    Some(proof_id(payload.network(), &hash))
}
