//! x402 `exact` on EVM chains: an EIP-3009 authorization of the token asked for, checked for
//! everything `transferWithAuthorization` would check (recipient, exact value, validity window,
//! EIP-712 signature — EIP-1271 for contract wallets —, balance, unused nonce, simulation), and
//! settled by the facilitator's own account calling it ([`call::prepare`]) or, in local mode, by
//! the seller's (an unsigned transaction handed back).
//!
//! Its identity is (chain, token, payer, nonce): the token is the one the terms name, never one
//! the payload chose.

use alloy::primitives::{Address, B256, Bytes, U256};
use alloy::rpc::types::TransactionRequest;
use alloy::sol_types::{Eip712Domain, SolCall as _, SolStruct as _};
use tollgate_protocol::Network;
use tollgate_protocol::x402::schemes::{Eip3009Authorization, ExactEvmPayload};
use tollgate_protocol::x402::{Asset, PaymentPayload};

use super::erc20::{self, Erc3009, TransferWithAuthorization};
use super::{EvmBackend, address, call, protocol_address, refuse};
use crate::chains::{Checked, Intent, ProofError, Reason, Refusal, Settle, Settler, Terms};

/// Proof identity of an EIP-3009 authorization: chain, token, payer and nonce.
fn authorization_id(network: &Network, token: &Address, from: &Address, nonce: &B256) -> String {
    format!("{network}:{token:#x}:{from:#x}:{nonce:#x}")
}

/// An `exact` payload, read: the authorization, and the `extra` of the requirement a v2 payload
/// accepted (where the token's EIP-712 domain may be named).
pub(super) struct Authorization {
    payload: ExactEvmPayload,
    accepted_extra: Option<serde_json::Value>,
}

impl Authorization {
    /// The identity it is claimed under on `network` when it pays `asset` (`None` when that is
    /// no token, or its addresses or nonce cannot be read).
    pub(super) fn identity(&self, network: &Network, asset: &Asset) -> Option<String> {
        let Asset::Token(token) = asset else { return None };
        let a = &self.payload.authorization;
        let (token, from) = (address(token)?, address(&a.from)?);
        Some(authorization_id(network, &token, &from, &a.nonce.parse().ok()?))
    }
}

/// Reads an `exact` payload.
pub(super) fn read(payload: &PaymentPayload) -> Result<Authorization, Refusal> {
    let p = ExactEvmPayload::from_value(payload.payload())
        .map_err(|e| Refusal::new(Reason::InvalidPayload, e.to_string()))?;
    let accepted_extra = match payload {
        PaymentPayload::V2(v2) => v2.accepted.extra.clone(),
        PaymentPayload::V1(_) => None,
    };
    Ok(Authorization { payload: p, accepted_extra })
}

/// The EIP-712 domain of `token`: name and version from the requirement's `extra` (or the one a
/// v2 payload accepted), else read from the contract (once: remembered).
async fn domain_of(
    backend: &EvmBackend,
    token: Address,
    accepted_extra: Option<&serde_json::Value>,
    terms: &Terms,
) -> Result<Eip712Domain, ProofError> {
    let extra = terms.extra.as_ref().or(accepted_extra);
    let given = |field: &str| extra.and_then(|e| e.get(field)).and_then(|v| v.as_str()).map(str::to_owned);
    let (name, version) = match (given("name"), given("version")) {
        (Some(name), Some(version)) => (name, version),
        (name, version) => {
            let (read_name, read_version) = published_domain(backend, token).await?;
            (name.unwrap_or(read_name), version.unwrap_or(read_version))
        }
    };
    Ok(tollgate_encoding::evm::eip3009_domain(name, version, backend.rpc.chain_id(), token))
}

/// The EIP-712 name and version `token` publishes (read once: remembered).
async fn published_domain(backend: &EvmBackend, token: Address) -> Result<(String, String), ProofError> {
    if let Some(known) = backend.domains.get(&token) {
        return Ok(known);
    }
    let rpc = &backend.rpc;
    let (name, version) =
        tokio::join!(erc20::view(rpc, token, &Erc3009::nameCall {}), erc20::view(rpc, token, &Erc3009::versionCall {}));
    let name = name.map_err(|_| {
        refuse(Reason::InvalidPaymentRequirements, "extra.name is needed: the token does not publish its name")
    })?;
    let version = version.map_err(|_| {
        refuse(Reason::InvalidPaymentRequirements, "extra.version is needed: the token does not publish it")
    })?;
    backend.domains.insert(token, (name.clone(), version.clone()));
    Ok((name, version))
}

/// The account the signature probe pays from: no one's key, no code (a made-up address).
const PROBE_PAYER: Address = Address::repeat_byte(0x7a);

/// The token's decimals, once it is known to be an EIP-3009 token that checks signatures (both
/// asked once, at the same time: remembered).
///
/// A verify leaves the signature to the token (see [`check`]), so a token is first asked a
/// `transferWithAuthorization` of nothing that nobody signed (a zero signature, from an account
/// without code): one that checks signatures fails it. One that does not fail it — a contract
/// whose fallback takes any call (WETH9's does), a token that skips the check — would pass any
/// forged authorization, and is refused.
async fn known_token(backend: &EvmBackend, token: Address, sender: Address) -> Result<u8, ProofError> {
    if let Some(decimals) = backend.decimals.get(&token) {
        return Ok(decimals);
    }
    let probe = Erc3009::transferWithAuthorizationCall {
        from: PROBE_PAYER,
        to: PROBE_PAYER,
        value: U256::ZERO,
        validAfter: U256::ZERO,
        validBefore: U256::MAX,
        nonce: B256::repeat_byte(0x7a),
        signature: Bytes::from_static(&[0; 65]),
    };
    let probe = TransactionRequest::default()
        .from(sender)
        .to(token)
        .input(Bytes::from(probe.abi_encode()).into())
        .gas_limit(backend.max_gas);
    let (decimals, probed) =
        tokio::join!(erc20::view(&backend.rpc, token, &Erc3009::decimalsCall {}), backend.rpc.simulate(probe));
    let decimals = decimals.map_err(|_| {
        refuse(Reason::InvalidPaymentRequirements, format!("{token} does not answer as an ERC-20 token"))
    })?;
    if probed?.is_ok() {
        return Err(refuse(
            Reason::InvalidPaymentRequirements,
            format!("{token} does not check EIP-3009 signatures: it accepts a transferWithAuthorization nobody signed"),
        ));
    }
    backend.decimals.insert(token, decimals);
    Ok(decimals)
}

/// Whether the authorization's signature is the payer's: its key (recovered here, no chain call),
/// else its wallet contract (EIP-1271: an account without code answers nothing, which is a "no").
async fn signed_by_payer(
    backend: &EvmBackend,
    from: Address,
    digest: B256,
    signature: &[u8],
) -> Result<bool, ProofError> {
    if super::verify::recover_signer(&digest, signature) == Some(from) {
        return Ok(true);
    }
    Ok(erc20::wallet_accepts(&backend.rpc, from, digest, signature).await?)
}

/// What a failing `transferWithAuthorization` is checked for, to name the reason.
#[derive(Clone, Copy)]
struct Failed<'a> {
    token: Address,
    message: &'a TransferWithAuthorization,
    domain: &'a Eip712Domain,
    signature: &'a [u8],
}

/// Why a `transferWithAuthorization` that the node says fails would fail, in x402's words: the
/// signature (over the EIP-712 digest, recovered here), then the payer's balance, then the nonce,
/// else the node's own message.
async fn why_it_fails(backend: &EvmBackend, failed: Failed<'_>, failure: String) -> ProofError {
    let Failed { token, message, domain, signature } = failed;
    let (from, nonce, value) = (message.from, message.nonce, message.value);
    match signed_by_payer(backend, from, message.eip712_signing_hash(domain), signature).await {
        Ok(true) => {}
        Ok(false) => return refuse(Reason::EvmSignature, "the signature is not the payer's over this authorization"),
        Err(unreadable) => return unreadable,
    }
    let rpc = &backend.rpc;
    let (balance, used) =
        tokio::join!(erc20::balance_of(rpc, token, from), erc20::authorization_used(rpc, token, from, nonce));
    if balance.is_ok_and(|b| b < value) {
        return refuse(Reason::InsufficientFunds, format!("{from} holds less than {value} of {token}"));
    }
    if used.unwrap_or(false) {
        return refuse(Reason::EvmNonceUsed, "this authorization's nonce is used already");
    }
    refuse(Reason::EvmSimulationFailed, format!("transferWithAuthorization would fail: {failure}"))
}

/// Checks an EIP-3009 authorization paying `pay_to` the token `terms.asset`, for `settler`.
///
/// What the token itself checks (signature, unused nonce, balance, its own rules) is asked of
/// the chain in one call: on a verify, `transferWithAuthorization` simulated (`eth_call`) from
/// the settling account with the gas cap as its gas, which fails if any of them fails or it
/// needs more gas; on a settlement, its gas estimated (which simulates it as the chain is then).
///
/// The signature is the token's to judge: it is what `transferWithAuthorization` checks before
/// it moves anything, so a call that succeeds was signed by the payer (or its wallet contract).
/// Only a failure recovers the signer here (about a fifth of a verify's CPU when it was done
/// every time), asks a wallet contract, and reads the balance and nonce, to say why.
pub(super) async fn check(
    backend: &EvmBackend,
    authorization: &Result<Authorization, Refusal>,
    terms: &Terms,
    (pay_to, now): (&Address, i64),
    (settler, intent): (Settler, Intent),
) -> Result<Checked, ProofError> {
    let sender = settling_account(backend, settler)?;
    let token = token_asked(terms)?;
    let read = authorization.as_ref().map_err(|r| ProofError::Refused(r.clone()))?;
    let a = &read.payload.authorization;
    let (from, to) = parties(a, pay_to)?;
    let decimals = known_token(backend, token, sender).await?;
    terms.price.check(a.value.get(), decimals, Reason::EvmValue)?;
    let margin = i64::try_from(backend.valid_before_margin_secs).unwrap_or(i64::MAX);
    let (message, signature) = signed_message(&read.payload, (from, to), now, margin)?;
    // The domain is settled before the chain is asked: a token that publishes none, for terms
    // that name none, is refused whatever the simulation says.
    let domain = domain_of(backend, token, read.accepted_extra.as_ref(), terms).await?;
    let why = Failed { token, message: &message, domain: &domain, signature: &signature };
    let (settle, fee) = settlement(backend, (sender, token), &why, (settler, intent)).await?;
    Ok(Checked {
        settle,
        payer: protocol_address(from),
        pay_to: protocol_address(to),
        asset: Asset::Token(protocol_address(token)),
        amount: a.value.get(),
        decimals,
        fee,
    })
}

/// The account that sends the settlement: the seller's (local mode) or the facilitator's.
pub(super) fn settling_account(backend: &EvmBackend, settler: Settler) -> Result<Address, ProofError> {
    match (settler, &backend.signer) {
        (Settler::Seller(seller), _) => address(&seller)
            .ok_or_else(|| refuse(Reason::InvalidPaymentRequirements, "the seller is not an EVM account")),
        (Settler::Facilitator, Some(signer)) => Ok(signer.0.address()),
        (Settler::Facilitator, None) => Err(refuse(
            Reason::UnsupportedScheme,
            format!("this facilitator has no account to settle x402 exact on {}", backend.rpc.network()),
        )),
    }
}

/// The token contract the terms ask for.
pub(super) fn token_asked(terms: &Terms) -> Result<Address, ProofError> {
    let Asset::Token(token) = terms.asset else {
        return Err(refuse(
            Reason::InvalidPaymentRequirements,
            "x402 exact on EVM pays a token: name it (asset), ETH is paid with exact-native",
        ));
    };
    address(&token).ok_or_else(|| refuse(Reason::InvalidPaymentRequirements, "the asset must be an EVM token contract"))
}

/// Who authorizes and who is paid: EVM addresses, a payer that is not the zero address, and
/// the seller's recipient.
fn parties(a: &Eip3009Authorization, pay_to: &Address) -> Result<(Address, Address), ProofError> {
    let (Some(from), Some(to)) = (address(&a.from), address(&a.to)) else {
        return Err(refuse(Reason::InvalidPayload, "authorization addresses must be EVM addresses"));
    };
    if from.is_zero() {
        // What a failed `ecrecover` returns: a token that forgets to refuse it would take any
        // signature for it.
        return Err(refuse(Reason::EvmSignature, "the zero address signs no authorization"));
    }
    if to != *pay_to {
        return Err(refuse(Reason::EvmRecipientMismatch, format!("the authorization pays {to}, not {pay_to}")));
    }
    Ok((from, to))
}

/// The EIP-712 message the payer signed, valid from before `now` until at least `margin`
/// seconds after it, and its signature's bytes.
fn signed_message(
    p: &ExactEvmPayload,
    (from, to): (Address, Address),
    now: i64,
    margin: i64,
) -> Result<(TransferWithAuthorization, Vec<u8>), ProofError> {
    let a = &p.authorization;
    let (valid_after, valid_before) = (a.valid_after.get(), a.valid_before.get());
    if valid_after >= u128::try_from(now).unwrap_or_default() {
        return Err(refuse(Reason::EvmValidAfter, format!("the authorization is valid only after {valid_after}")));
    }
    if valid_before < u128::try_from(now.saturating_add(margin)).unwrap_or_default() {
        return Err(refuse(
            Reason::EvmValidBefore,
            format!(
                "the authorization expires at {valid_before}, too soon to settle: it must stay valid {margin} s more"
            ),
        ));
    }
    let nonce: B256 =
        a.nonce.parse().map_err(|_| refuse(Reason::InvalidPayload, "authorization.nonce is not 32 bytes"))?;
    let signature = alloy::primitives::hex::decode(p.signature.trim_start_matches("0x"))
        .map_err(|_| refuse(Reason::EvmSignature, "the signature is not hex"))?;
    let message = TransferWithAuthorization {
        from,
        to,
        value: U256::from(a.value.get()),
        validAfter: U256::from(valid_after),
        validBefore: U256::from(valid_before),
        nonce,
    };
    Ok((message, signature))
}

/// `transferWithAuthorization` from the settling account, simulated ([`call::prepare`]); a
/// failure is named.
async fn settlement(
    backend: &EvmBackend,
    (sender, token): (Address, Address),
    why: &Failed<'_>,
    (settler, intent): (Settler, Intent),
) -> Result<(Settle, Option<u128>), ProofError> {
    let m = why.message;
    let data = Erc3009::transferWithAuthorizationCall {
        from: m.from,
        to: m.to,
        value: m.value,
        validAfter: m.validAfter,
        validBefore: m.validBefore,
        nonce: m.nonce,
        signature: Bytes::copy_from_slice(why.signature),
    }
    .abi_encode();
    match call::prepare(backend, (sender, token, data), (settler, intent)).await? {
        call::Prepared::Passes(settle, fee) => Ok((settle, fee)),
        call::Prepared::Fails(failure) => Err(why_it_fails(backend, *why, failure).await),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const FROM: &str = "0xf0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0";
    const PAY_TO: &str = "0x5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e";
    const NOW: i64 = 1_000;
    const MARGIN: i64 = 6;

    fn payload(from: &str, to: &str, (valid_after, valid_before): (&str, &str)) -> ExactEvmPayload {
        let nonce = format!("0x{}", "ab".repeat(32));
        ExactEvmPayload::from_value(&json!({"signature": format!("0x{}", "1b".repeat(65)), "authorization": {
            "from": from, "to": to, "value": "1000", "validAfter": valid_after, "validBefore": valid_before,
            "nonce": nonce}}))
        .unwrap()
    }

    use crate::chains::refusal::refusal_reason as reason;

    #[test]
    fn the_payer_is_someone_and_the_recipient_the_seller() {
        let pay_to: Address = PAY_TO.parse().unwrap();
        let p = payload(FROM, PAY_TO, ("0", "2000"));
        assert_eq!(parties(&p.authorization, &pay_to).unwrap(), (FROM.parse().unwrap(), pay_to));
        let zero = payload(&format!("{:#x}", Address::ZERO), PAY_TO, ("0", "2000"));
        assert_eq!(reason(parties(&zero.authorization, &pay_to)), Some(Reason::EvmSignature));
        let elsewhere = payload(FROM, FROM, ("0", "2000"));
        assert_eq!(reason(parties(&elsewhere.authorization, &pay_to)), Some(Reason::EvmRecipientMismatch));
    }

    /// Valid strictly after `validAfter` (EIP-3009: `now > validAfter`) and until at least
    /// now + margin.
    #[test]
    fn the_validity_window_at_its_edges() {
        let parties = (FROM.parse().unwrap(), PAY_TO.parse().unwrap());
        let window = |after: &str, before: &str| {
            reason(signed_message(&payload(FROM, PAY_TO, (after, before)), parties, NOW, MARGIN))
        };
        assert_eq!(window("999", "1006"), None);
        assert_eq!(window("1000", "2000"), Some(Reason::EvmValidAfter));
        assert_eq!(window("0", "1005"), Some(Reason::EvmValidBefore));
        let (message, signature) =
            signed_message(&payload(FROM, PAY_TO, ("999", "1006")), parties, NOW, MARGIN).unwrap();
        assert_eq!((message.from, message.to, message.value), (parties.0, parties.1, U256::from(1_000u64)));
        assert_eq!((message.validAfter, message.validBefore), (U256::from(999u64), U256::from(1_006u64)));
        assert_eq!(message.nonce, B256::repeat_byte(0xab));
        assert_eq!(signature, vec![0x1b; 65]);
    }

    #[test]
    fn identity_is_chain_token_payer_and_nonce() {
        let value = json!({"x402Version": 1, "scheme": "exact", "network": "base-sepolia",
            "payload": {"signature": format!("0x{}", "1b".repeat(65)), "authorization": {"from": FROM, "to": PAY_TO, "value": "1",
            "validAfter": "0", "validBefore": "2000", "nonce": format!("0x{}", "ab".repeat(32))}}});
        let a = read(&serde_json::from_value(value).unwrap()).unwrap();
        assert_eq!(a.accepted_extra, None);
        let token: tollgate_protocol::Address = PAY_TO.parse().unwrap();
        let network = Network::eip155(84_532);
        let id = a.identity(&network, &Asset::Token(token)).unwrap();
        assert_eq!(id, format!("eip155:84532:{PAY_TO}:{FROM}:0x{}", "ab".repeat(32)));
        assert_eq!(a.identity(&network, &Asset::Native), None);
    }
}
