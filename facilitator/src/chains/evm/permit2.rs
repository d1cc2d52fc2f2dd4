//! x402 `exact` through Permit2 (`extra.assetTransferMethod: "permit2"`: any ERC-20) and `upto`
//! (the buyer signs a most amount, the seller charges what the request used), on EVM chains.
//!
//! The payer signs a Permit2 `PermitWitnessTransferFrom` for an x402 proxy; the proxy checks the
//! witness (the recipient; for `upto` the facilitator, the only account that may settle and
//! choose the amount) and calls Permit2, which checks the signature, the deadline and the nonce
//! and moves the tokens under the payer's ERC-20 allowance to Permit2. When the payer has none,
//! an EIP-2612 permit offered in the payload's `eip2612GasSponsoring` extension grants it in the
//! same settlement (`settleWithPermit`); or the payer's own signed `approve(Permit2, …)`
//! transaction, offered in `erc20ApprovalGasSponsoring`, is broadcast and mined first. The payer
//! pays that transaction's gas: this facilitator does not fund it (x402 asks such funding to be
//! atomic with the settlement, which a public mempool cannot promise: a payer could replace its
//! approval and keep the gas money).
//!
//! Everything the payload says of itself (proxy, recipient, facilitator, window, token, amount)
//! is checked here without the chain; what Permit2 and the token check is asked of the chain in
//! one simulation of the settlement. Only a failure asks more, to name the reason.
//!
//! Its identity is (chain, payer, Permit2 nonce): Permit2's nonces are the owner's, across tokens
//! and spenders.

use alloy::primitives::{Address, B256, Bytes, U256};
use alloy::sol_types::SolCall as _;
use tollgate_encoding::permit2::{self as wire, EXACT_PROXY, PERMIT2, UPTO_PROXY};
use tollgate_protocol::Network;
use tollgate_protocol::x402::schemes::{Eip2612Sponsoring, Erc20ApprovalSponsoring, Permit2Payload};
use tollgate_protocol::x402::{Asset, PaymentPayload};

use super::exact::{settling_account, token_asked};
use super::{EvmBackend, address, call, erc20, protocol_address, refuse};
use crate::chains::{Checked, Intent, Price, ProofError, Reason, Refusal, Settler, Terms};

/// Which proxy settles it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Method {
    /// x402 `exact`: the whole permitted amount.
    Exact,
    /// x402 `upto`: the amount the seller charges, at most the permitted one.
    Upto,
}

impl Method {
    const fn proxy(self) -> Address {
        match self {
            Self::Exact => EXACT_PROXY,
            Self::Upto => UPTO_PROXY,
        }
    }
}

/// A Permit2 payload, read.
pub(super) struct Transfer {
    method: Method,
    from: Address,
    token: Address,
    permitted: U256,
    spender: Address,
    nonce: U256,
    deadline: U256,
    to: Address,
    facilitator: Option<Address>,
    valid_after: U256,
    signature: Vec<u8>,
    /// An EIP-2612 permit granting Permit2 its allowance, when the payer offered one.
    eip2612: Option<Eip2612>,
    /// The payer's signed approval of Permit2, when it offered one (and no EIP-2612 permit).
    approval: Option<Approval>,
}

/// A signed ERC-20 approval offered with a Permit2 payload, read: what the extension names, and
/// what the transaction is — its signer and nonce, target, the approval it makes, its chain and
/// the most its gas costs the payer — with its bytes and hash to broadcast.
struct Approval {
    from: Option<Address>,
    asset: Option<Address>,
    spender: Option<Address>,
    signer: Address,
    nonce: u64,
    target: Option<Address>,
    approves: Option<(Address, U256)>,
    chain_id: u64,
    max_fee_per_gas: u128,
    gas_cost: u128,
    raw: Vec<u8>,
    hash: B256,
}

impl Approval {
    /// The approval a v2 payload's extensions offer, `None` without one.
    fn read(payload: &PaymentPayload) -> Result<Option<Self>, Refusal> {
        use alloy::consensus::TxEnvelope;
        let PaymentPayload::V2(v2) = payload else { return Ok(None) };
        let format = |m: String| Refusal::new(Reason::Erc20ApprovalFormat, m);
        let offered = Erc20ApprovalSponsoring::from_extensions(&v2.extensions).map_err(|e| format(e.to_string()))?;
        let Some(p) = offered else { return Ok(None) };
        let (envelope, raw) = super::verify::decode(&p.signed_transaction).map_err(|r| format(r.message))?;
        let TxEnvelope::Eip1559(signed) = &envelope else {
            return Err(format("the approval must be an EIP-1559 transaction".into()));
        };
        let Some((signer, nonce)) = super::verify::sender_and_nonce(&envelope) else {
            return Err(Refusal::new(Reason::Erc20ApprovalSigner, "the approval's signature recovers no signer"));
        };
        let tx = signed.tx();
        let approves = wire::Erc20::approveCall::abi_decode(&tx.input).ok().map(|c| (c.spender, c.value));
        Ok(Some(Self {
            from: address(&p.from),
            asset: address(&p.asset),
            spender: address(&p.spender),
            signer,
            nonce,
            target: tx.to.to().copied(),
            approves,
            chain_id: tx.chain_id,
            max_fee_per_gas: tx.max_fee_per_gas,
            gas_cost: u128::from(tx.gas_limit).saturating_mul(tx.max_fee_per_gas),
            hash: *signed.hash(),
            raw,
        }))
    }

    /// Whether it is the payer's approval of at least `permitted` of `token` to Permit2 on
    /// `chain_id`, from what it says and what it is.
    fn bound(&self, (from, token, permitted): (Address, Address, U256), chain_id: u64) -> Result<(), Refusal> {
        let no = |reason, message: &str| Err(Refusal::new(reason, message));
        if self.from != Some(from) {
            return no(Reason::Erc20ApprovalFrom, "the approval is offered for another owner");
        }
        if self.signer != from {
            return no(Reason::Erc20ApprovalSigner, "the approval is not signed by the payer");
        }
        if self.asset != Some(token) || self.target != Some(token) {
            return no(Reason::Erc20ApprovalAsset, "the approval is for another token");
        }
        if self.spender != Some(PERMIT2) {
            return no(Reason::Erc20ApprovalSpender, "the approval lets someone other than Permit2 spend");
        }
        match self.approves {
            Some((spender, _)) if spender != PERMIT2 => {
                no(Reason::Erc20ApprovalSpender, "the approval transaction approves someone other than Permit2")
            }
            Some((_, value)) if value < permitted => {
                no(Reason::Erc20ApprovalCalldata, "the approval transaction approves less than the permit moves")
            }
            Some(_) if self.chain_id != chain_id => {
                no(Reason::Erc20ApprovalTxFailed, "the approval transaction is signed for another chain")
            }
            Some(_) => Ok(()),
            None => {
                no(Reason::Erc20ApprovalCalldata, "the approval transaction does not call approve(spender, amount)")
            }
        }
    }
}

/// An EIP-2612 permit offered with a Permit2 payload, read: its parties, and what the proxies
/// take (value, deadline, r, s, v).
struct Eip2612 {
    from: Option<Address>,
    asset: Option<Address>,
    spender: Option<Address>,
    value: U256,
    deadline: U256,
    r: B256,
    s: B256,
    v: u8,
}

impl Eip2612 {
    /// The permit a v2 payload's extensions offer, `None` without one.
    fn read(payload: &PaymentPayload) -> Result<Option<Self>, Refusal> {
        let PaymentPayload::V2(v2) = payload else { return Ok(None) };
        let offered = Eip2612Sponsoring::from_extensions(&v2.extensions)
            .map_err(|e| Refusal::new(Reason::Eip2612Format, e.to_string()))?;
        let Some(p) = offered else { return Ok(None) };
        // 65 bytes of hex: checked by `from_extensions`.
        let bytes = alloy::primitives::hex::decode(p.signature.trim_start_matches("0x"))
            .map_err(|_| Refusal::new(Reason::Eip2612Format, "the EIP-2612 signature is not hex"))?;
        Ok(Some(Self {
            from: address(&p.from),
            asset: address(&p.asset),
            spender: address(&p.spender),
            value: U256::from(p.amount.get()),
            deadline: U256::from(p.deadline.get()),
            r: B256::from_slice(&bytes[..32]),
            s: B256::from_slice(&bytes[32..64]),
            v: bytes[64],
        }))
    }
}

/// Reads a Permit2 payload settled by `method`'s proxy.
pub(super) fn read(payload: &PaymentPayload, method: Method) -> Result<Transfer, Refusal> {
    let invalid = |e: String| Refusal::new(Reason::InvalidPayload, e);
    let p = Permit2Payload::from_value(payload.payload()).map_err(|e| invalid(e.to_string()))?;
    let eip2612 = Eip2612::read(payload)?;
    // An EIP-2612 permit settles in the same transaction: an approval offered beside it is not
    // needed.
    let approval = if eip2612.is_some() { None } else { Approval::read(payload)? };
    let a = &p.permit2_authorization;
    let evm = |a: &tollgate_protocol::Address| address(a).ok_or_else(|| invalid("not an EVM address".into()));
    let nonce = parse_uint256(&a.nonce).ok_or_else(|| invalid("permit2Authorization.nonce is not a uint256".into()))?;
    let signature = alloy::primitives::hex::decode(p.signature.trim_start_matches("0x"))
        .map_err(|_| Refusal::new(Reason::Permit2Signature, "the signature is not hex"))?;
    match (method, &a.witness.facilitator) {
        (Method::Upto, None) => return Err(invalid("an upto witness names the facilitator".into())),
        (Method::Exact, Some(_)) => return Err(invalid("an exact witness names no facilitator".into())),
        _ => {}
    }
    Ok(Transfer {
        method,
        from: evm(&a.from)?,
        token: evm(&a.permitted.token)?,
        permitted: U256::from(a.permitted.amount.get()),
        spender: evm(&a.spender)?,
        nonce,
        deadline: U256::from(a.deadline.get()),
        to: evm(&a.witness.to)?,
        facilitator: a.witness.facilitator.as_ref().map(evm).transpose()?,
        valid_after: U256::from(a.witness.valid_after.get()),
        signature,
        eip2612,
        approval,
    })
}

/// A uint256 written in decimal or `0x`-hex.
pub(super) fn parse_uint256(text: &str) -> Option<U256> {
    match text.strip_prefix("0x") {
        Some(hex) => U256::from_str_radix(hex, 16).ok(),
        None => U256::from_str_radix(text, 10).ok(),
    }
}

impl Transfer {
    /// The identity it is claimed under on `network`: the payer's Permit2 nonce.
    pub(super) fn identity(&self, network: &Network) -> String {
        format!("{network}:permit2:{:#x}:{:#x}", self.from, self.nonce)
    }

    /// What the payload binds, against the terms and the settling account, without the chain:
    /// the proxy, the recipient, the facilitator (`upto`), the window, the token, the EIP-2612
    /// permit's parties.
    fn bound(
        &self,
        (token, pay_to, sender): (Address, Address, Address),
        now: U256,
        margin: U256,
    ) -> Result<(), Refusal> {
        let no = |reason, message: String| Err(Refusal::new(reason, message));
        if self.spender != self.method.proxy() {
            return no(
                Reason::Permit2Spender,
                format!("the permit is for {}, not the x402 proxy {}", self.spender, self.method.proxy()),
            );
        }
        if self.from.is_zero() {
            return no(Reason::Permit2Signature, "the zero address signs no permit".into());
        }
        if self.to != pay_to {
            return no(Reason::Permit2Recipient, format!("the permit pays {}, not {pay_to}", self.to));
        }
        if self.method == Method::Upto && self.facilitator != Some(sender) {
            return no(
                Reason::UptoFacilitatorMismatch,
                format!("the permit lets another account settle it, not {sender}"),
            );
        }
        if self.deadline < now.saturating_add(margin) {
            return no(
                Reason::Permit2DeadlineExpired,
                format!(
                    "the permit expires at {}, too soon to settle: it must stay valid {margin} s more",
                    self.deadline
                ),
            );
        }
        if self.valid_after > now {
            return no(Reason::Permit2NotYetValid, format!("the permit is valid only from {}", self.valid_after));
        }
        if self.token != token {
            return no(Reason::Permit2TokenMismatch, format!("the permit moves {}, not {token}", self.token));
        }
        if let Some(p) = &self.eip2612 {
            let (from, asset, spender) = (p.from, p.asset, p.spender);
            if from != Some(self.from) {
                return no(Reason::Eip2612From, "the EIP-2612 permit is signed for another owner".into());
            }
            if asset != Some(token) {
                return no(Reason::Eip2612Asset, "the EIP-2612 permit is for another token".into());
            }
            if spender != Some(PERMIT2) {
                return no(Reason::Eip2612Spender, "the EIP-2612 permit lets someone other than Permit2 spend".into());
            }
            if p.deadline < now.saturating_add(margin) {
                return no(Reason::Eip2612Deadline, "the EIP-2612 permit expires too soon to settle".into());
            }
            if p.value != self.permitted {
                return no(
                    Reason::Eip2612Format,
                    "the EIP-2612 permit must allow exactly the Permit2 permit's amount".into(),
                );
            }
        }
        Ok(())
    }

    /// The amount this settlement moves, checked against the price: `exact` the whole permitted
    /// amount, the price; `upto` the price charged, the permitted amount when verified (a seller
    /// verifies the most it may charge) and at most it when settled.
    fn charge(&self, price: &Price, decimals: u8, intent: Intent) -> Result<u128, Refusal> {
        let permitted = u128::try_from(self.permitted).unwrap_or(u128::MAX);
        if self.method == Method::Exact {
            price.check(permitted, decimals, Reason::Permit2AmountMismatch)?;
            return Ok(permitted);
        }
        let &Price::Exactly(charged) = price else {
            return Err(Refusal::new(Reason::InvalidPaymentRequirements, "upto charges an exact amount: name it"));
        };
        match intent {
            Intent::Verify if charged != permitted => Err(Refusal::new(
                Reason::Permit2AmountMismatch,
                format!("the permit allows {permitted} base units, not the {charged} most asked"),
            )),
            Intent::Settle if charged > permitted => Err(Refusal::new(
                Reason::UptoSettlementExceeds,
                format!("the charge of {charged} base units is above the {permitted} the buyer allowed"),
            )),
            Intent::Settle if charged == 0 => Err(Refusal::new(
                Reason::InvalidPaymentRequirements,
                "a charge of nothing is settled without the chain",
            )),
            _ => Ok(charged),
        }
    }

    /// What a check that passed says: `amount` of `token` (with its `decimals`) from the payer to
    /// the recipient, settled as `settle`, costing the facilitator at most `fee`.
    fn checked(
        &self,
        (token, amount, decimals): (Address, u128, u8),
        settle: crate::chains::Settle,
        fee: Option<u128>,
    ) -> Checked {
        Checked {
            settle,
            payer: protocol_address(self.from),
            pay_to: protocol_address(self.to),
            asset: Asset::Token(protocol_address(token)),
            amount,
            decimals,
            fee,
        }
    }

    /// The EIP-712 digest the payer signed (Permit2's domain, the proxy as spender).
    fn digest(&self, chain_id: u64) -> B256 {
        wire::Permit2Message {
            token: self.token,
            amount: self.permitted,
            spender: self.spender,
            nonce: self.nonce,
            deadline: self.deadline,
            to: self.to,
            facilitator: match self.method {
                Method::Exact => None,
                Method::Upto => Some(self.facilitator.unwrap_or_default()),
            },
            valid_after: self.valid_after,
        }
        .signing_hash(chain_id)
    }

    /// The proxy call settling `amount`: `settle`, or `settleWithPermit` with the EIP-2612 permit.
    fn call_data(&self, amount: U256) -> Vec<u8> {
        let signature = Bytes::copy_from_slice(&self.signature);
        let permit2612 = self.eip2612.as_ref().map(|p| (p.value, p.deadline, p.r, p.s, p.v));
        match self.method {
            Method::Exact => {
                use wire::exact::{ExactProxy, TokenPermissions, Witness};
                let permit = ExactProxy::PermitTransferFrom {
                    permitted: TokenPermissions { token: self.token, amount: self.permitted },
                    nonce: self.nonce,
                    deadline: self.deadline,
                };
                let witness = Witness { to: self.to, validAfter: self.valid_after };
                match permit2612 {
                    None => ExactProxy::settleCall { permit, owner: self.from, witness, signature }.abi_encode(),
                    Some((value, deadline, r, s, v)) => ExactProxy::settleWithPermitCall {
                        permit2612: ExactProxy::Eip2612Permit { value, deadline, r, s, v },
                        permit,
                        owner: self.from,
                        witness,
                        signature,
                    }
                    .abi_encode(),
                }
            }
            Method::Upto => {
                use wire::upto::{TokenPermissions, UptoProxy, Witness};
                let permit = UptoProxy::PermitTransferFrom {
                    permitted: TokenPermissions { token: self.token, amount: self.permitted },
                    nonce: self.nonce,
                    deadline: self.deadline,
                };
                let facilitator = self.facilitator.unwrap_or_default();
                let witness = Witness { to: self.to, facilitator, validAfter: self.valid_after };
                match permit2612 {
                    None => UptoProxy::settleCall { permit, amount, owner: self.from, witness, signature }.abi_encode(),
                    Some((value, deadline, r, s, v)) => UptoProxy::settleWithPermitCall {
                        permit2612: UptoProxy::Eip2612Permit { value, deadline, r, s, v },
                        permit,
                        amount,
                        owner: self.from,
                        witness,
                        signature,
                    }
                    .abi_encode(),
                }
            }
        }
    }
}

/// Checks a Permit2 payload paying `pay_to` the token `terms.asset`, for `settler`: what it
/// binds without the chain, then the settlement simulated once from the settling account.
pub(super) async fn check(
    backend: &EvmBackend,
    transfer: &Result<Transfer, Refusal>,
    terms: &Terms,
    (pay_to, now): (&Address, i64),
    (settler, intent): (Settler, Intent),
) -> Result<Checked, ProofError> {
    let sender = settling_account(backend, settler)?;
    let token = token_asked(terms)?;
    let t = transfer.as_ref().map_err(|r| ProofError::Refused(r.clone()))?;
    let now = U256::from(u64::try_from(now).unwrap_or_default());
    t.bound((token, *pay_to, sender), now, U256::from(backend.valid_before_margin_secs))?;
    let decimals = decimals(backend, token).await?;
    let amount = t.charge(&terms.price, decimals, intent)?;
    let data = t.call_data(U256::from(amount));
    if let Some(approval) = &t.approval {
        approval.bound((t.from, token, t.permitted), backend.rpc.chain_id())?;
        let allowance = wire::Erc20::allowanceCall { owner: t.from, spender: PERMIT2 };
        // Approved already (a retry after its approval was mined): settled as any other.
        if erc20::view(&backend.rpc, token, &allowance).await? < t.permitted {
            return approved_first(backend, t, approval, (settler, intent), (token, amount, decimals, data)).await;
        }
    }
    match call::prepare(backend, (sender, t.method.proxy(), data), (settler, intent)).await? {
        call::Prepared::Passes(settle, fee) => Ok(t.checked((token, amount, decimals), settle, fee)),
        call::Prepared::Fails(failure) => Err(why_it_fails(backend, t, failure).await),
    }
}

/// A permit that can settle only once the payer's offered approval of Permit2 is mined: checked
/// without simulating the settlement (it cannot pass yet) — the approval's nonce is the payer's
/// next, the payer can pay its gas, holds the tokens, has not used the permit's nonce, and
/// signed the permit — and, to settle, the approval sent first and the settlement estimated
/// after it (see [`call::after`]). The facilitator settles it (local mode cannot: the seller
/// would have to send the payer's approval).
async fn approved_first(
    backend: &EvmBackend,
    t: &Transfer,
    approval: &Approval,
    (settler, intent): (Settler, Intent),
    (token, amount, decimals, data): (Address, u128, u8, Vec<u8>),
) -> Result<Checked, ProofError> {
    if settler != Settler::Facilitator {
        return Err(refuse(
            Reason::InvalidPaymentRequirements,
            "a payer's approval of Permit2 is sent by the facilitator: settle it through x402 or hosted mode",
        ));
    }
    let rpc = &backend.rpc;
    let (word, bit) = wire::nonce_position(t.nonce);
    let bitmap = wire::Permit2::nonceBitmapCall { owner: t.from, word };
    let (next, eth, tokens, nonces, fees) = tokio::join!(
        rpc.pending_nonce(t.from),
        rpc.balance(t.from),
        erc20::balance_of(rpc, token, t.from),
        erc20::view(rpc, PERMIT2, &bitmap),
        rpc.fees(),
    );
    // Its nonce is the payer's next: it is still to be sent. (Mined already, the allowance it
    // gave is spent or revoked: the permit cannot settle.)
    let next = next?;
    if approval.nonce < next {
        return Err(refuse(
            Reason::Permit2AllowanceRequired,
            format!("{} has no Permit2 allowance left, and its approval's nonce is used", t.from),
        ));
    }
    if approval.nonce != next {
        return Err(refuse(
            Reason::Erc20ApprovalTxFailed,
            format!("the approval's nonce {} is not the payer's next ({next})", approval.nonce),
        ));
    }
    // One that pays less than the network's base fee is never mined: the settlement would wait
    // for it in vain, at the seller's sponsorship budget.
    let fees = fees?;
    let base_fee = fees.max_fee_per_gas.saturating_sub(fees.max_priority_fee_per_gas) / 2;
    if approval.max_fee_per_gas < base_fee {
        return Err(refuse(
            Reason::Erc20ApprovalTxFailed,
            format!("the approval pays {} wei of gas, below the network's {base_fee}", approval.max_fee_per_gas),
        ));
    }
    if eth? < U256::from(approval.gas_cost) {
        return Err(refuse(
            Reason::Erc20ApprovalTxFailed,
            "the payer cannot pay its approval's gas (this facilitator does not fund it)",
        ));
    }
    if tokens? < t.permitted {
        return Err(refuse(
            Reason::Permit2InsufficientBalance,
            format!("{} holds less than {} of {token}", t.from, t.permitted),
        ));
    }
    if nonces?.bit(usize::from(bit)) {
        return Err(refuse(Reason::Permit2NonceUsed, "this permit's nonce is used already"));
    }
    if super::verify::recover_signer(&t.digest(rpc.chain_id()), &t.signature) != Some(t.from) {
        return Err(refuse(Reason::Permit2Signature, "the signature is not the payer's over this permit"));
    }
    let (settle, fee) = match intent {
        Intent::Verify => (crate::chains::Settle::Nothing, None),
        Intent::Settle => {
            let first = (approval.raw.clone(), approval.hash);
            let (call, most) = call::after(backend, first, (t.method.proxy(), data), fees);
            (crate::chains::Settle::Sign(call), Some(most))
        }
    };
    Ok(t.checked((token, amount, decimals), settle, fee))
}

/// The token's decimals (read once: remembered). An account without code answers nothing, so a
/// permit of a token that does not exist is refused here: Permit2's transfer from an account
/// without code would "succeed" and move nothing.
pub(super) async fn decimals(backend: &EvmBackend, token: Address) -> Result<u8, ProofError> {
    if let Some(decimals) = backend.token_decimals.get(&token) {
        return Ok(decimals);
    }
    let decimals = erc20::view(&backend.rpc, token, &erc20::Erc3009::decimalsCall {}).await.map_err(|_| {
        refuse(Reason::InvalidPaymentRequirements, format!("{token} does not answer as an ERC-20 token"))
    })?;
    backend.token_decimals.insert(token, decimals);
    Ok(decimals)
}

/// Why a settlement the node says fails would fail, in x402's words: the proxy missing, the
/// signature (recovered here, else the payer's EIP-1271 wallet), the balance, the nonce used, the
/// allowance to Permit2 missing; else the node's own message.
async fn why_it_fails(backend: &EvmBackend, t: &Transfer, failure: String) -> ProofError {
    let rpc = &backend.rpc;
    let (word, bit) = wire::nonce_position(t.nonce);
    let allowance = wire::Erc20::allowanceCall { owner: t.from, spender: PERMIT2 };
    let bitmap = wire::Permit2::nonceBitmapCall { owner: t.from, word };
    let (proxy, balance, allowance, nonces) = tokio::join!(
        rpc.code(t.method.proxy()),
        erc20::balance_of(rpc, t.token, t.from),
        erc20::view(rpc, t.token, &allowance),
        erc20::view(rpc, PERMIT2, &bitmap),
    );
    if proxy.is_ok_and(|code| code.is_empty()) {
        return refuse(Reason::Permit2ProxyNotDeployed, format!("no x402 proxy at {} on this chain", t.method.proxy()));
    }
    let digest = t.digest(rpc.chain_id());
    let signed = super::verify::recover_signer(&digest, &t.signature) == Some(t.from)
        || erc20::wallet_accepts(rpc, t.from, digest, &t.signature).await.unwrap_or(false);
    if !signed {
        return refuse(Reason::Permit2Signature, "the signature is not the payer's over this permit");
    }
    if balance.is_ok_and(|b| b < t.permitted) {
        return refuse(
            Reason::Permit2InsufficientBalance,
            format!("{} holds less than {} of {}", t.from, t.permitted, t.token),
        );
    }
    if nonces.is_ok_and(|used| used.bit(usize::from(bit))) {
        return refuse(Reason::Permit2NonceUsed, "this permit's nonce is used already");
    }
    if allowance.is_ok_and(|a| a < t.permitted) {
        return refuse(
            Reason::Permit2AllowanceRequired,
            format!(
                "{} has not approved Permit2 to spend {} of {}: approve it once, or sign an EIP-2612 permit",
                t.from, t.permitted, t.token
            ),
        );
    }
    refuse(Reason::Permit2SimulationFailed, format!("the settlement would fail: {failure}"))
}

#[cfg(test)]
#[path = "permit2_tests.rs"]
mod tests;
