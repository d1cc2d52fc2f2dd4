//! `exact-native` on Solana: SOL paid by a signed System transfer (checked, then broadcast), or
//! by a receipt of a confirmed one (the sender's signature over the payment's terms, and the
//! transfer on chain, sent by that sender).

use solana_sdk::message::VersionedMessage;
use solana_sdk::pubkey::Pubkey;
use solana_sdk::signature::Signature;
use solana_sdk::transaction::VersionedTransaction;
use tollgate_protocol::x402::schemes::{ExactNativePayload, NativeReceipt, receipt_message};
use tollgate_protocol::x402::{Asset, PaymentPayload};
use tollgate_protocol::{Address, ChainFamily};

use super::build::pubkey;
use super::rpc::SolanaRpc;
use super::{SolanaBackend, encode, refuse, verify};
use crate::chains::{Checked, Intent, Outgoing, ProofError, Reason, Refusal, Settle, Settler, Terms};

/// An `exact-native` payload, read.
pub(super) enum Native {
    /// A signed System transfer, decoded.
    Transfer(VersionedTransaction),
    /// A receipt of a confirmed transfer.
    Receipt(NativeReceipt),
}

impl Native {
    /// The signature it is claimed under: the transfer's (its first), or the one the receipt names.
    pub(super) fn identity(&self) -> String {
        match self {
            // A decoded transaction is sanitized: it has a signature for each signer, at least one.
            Self::Transfer(tx) => tx.signatures.first().map(ToString::to_string).unwrap_or_default(),
            Self::Receipt(r) => r.transaction.clone(),
        }
    }
}

/// Reads an `exact-native` payload (the one decode of its transaction).
pub(super) fn read(payload: &PaymentPayload) -> Result<Native, Refusal> {
    let native = ExactNativePayload::from_value(payload.payload())
        .map_err(|e| Refusal::new(Reason::InvalidPayload, e.to_string()))?;
    Ok(match native {
        ExactNativePayload::Transaction(encoded) => Native::Transfer(verify::decode(&encoded)?),
        ExactNativePayload::Receipt(r) => Native::Receipt(r),
    })
}

/// The fee the cluster charges for `message`, lamports: derived from the message while the
/// cluster's lamports per signature is known, else asked (and the rate learned from the answer
/// when the message has no priority fee).
pub(super) async fn fee_of(backend: &SolanaBackend, message: &VersionedMessage) -> Result<u64, ProofError> {
    // `None` for any version but legacy and v0, which the cluster is then asked about: refused.
    let parts = verify::FeeParts::of(message);
    if let (Some(parts), Some(rate)) = (parts, backend.signature_fee.get(&())) {
        return Ok(parts.fee(rate));
    }
    let rpc = &backend.rpc;
    let fee = match message {
        VersionedMessage::Legacy(m) => rpc.fee_for(m).await?,
        VersionedMessage::V0(m) => rpc.fee_for(m).await?,
        _ => return Err(refuse(Reason::SvmTransaction, "only legacy and v0 transactions are accepted")),
    };
    if let Some(rate) = parts.and_then(|p| p.rate_in(fee)) {
        backend.signature_fee.insert((), rate);
    }
    Ok(fee)
}

/// Checks an `exact-native` payload paying `pay_to`.
pub(super) async fn check(
    backend: &SolanaBackend,
    native: &Result<Native, Refusal>,
    terms: &Terms,
    pay_to: &Pubkey,
    (settler, intent): (Settler, Intent),
) -> Result<Checked, ProofError> {
    if terms.asset != Asset::Native {
        return Err(refuse(Reason::InvalidPaymentRequirements, "exact-native pays SOL, but a token is asked"));
    }
    match native.as_ref().map_err(|r| ProofError::Refused(r.clone()))? {
        Native::Transfer(tx) => signed_transfer(backend, tx, pay_to, terms, (settler, intent)).await,
        Native::Receipt(_) if matches!(settler, Settler::Seller(_)) => Err(refuse(
            Reason::InvalidPayload,
            "a receipt is for a transfer already on chain: present it to /payment/receive",
        )),
        Native::Receipt(r) => receipt(&backend.rpc, r, pay_to, terms).await,
    }
}

/// A signed transfer, checked without the chain, then against it (its blockhash and the payer's
/// balance, asked at once; its fee derived, or asked alongside until the cluster's rate is known).
async fn signed_transfer(
    backend: &SolanaBackend,
    tx: &VersionedTransaction,
    pay_to: &Pubkey,
    terms: &Terms,
    (settler, intent): (Settler, Intent),
) -> Result<Checked, ProofError> {
    let rpc = &backend.rpc;
    let checked = verify::check_signed_transfer(tx, pay_to, 0)?;
    let decimals = ChainFamily::Solana.native_decimals();
    terms.price.check(u128::from(checked.transfer.lamports), decimals, Reason::SvmAmountMismatch)?;
    let source = checked.transfer.from;
    let sponsored = checked.fee_payer != source;
    let fee_payer_balance =
        async { if sponsored { rpc.balance(&checked.fee_payer).await.map(Some) } else { Ok(None) } };
    let (valid, fee, balance, fee_payer_balance, rent, payee) = tokio::join!(
        rpc.blockhash_valid(&checked.blockhash),
        fee_of(backend, &tx.message),
        rpc.balance(&source),
        fee_payer_balance,
        rent_minimum(backend),
        funded_payee(backend, &checked.transfer.to),
    );
    if !valid? {
        return Err(refuse(Reason::PaymentExpired, "the transaction's blockhash has expired; sign a fresh one"));
    }
    let (fee, rent) = (fee?, rent?);
    // The runtime leaves every account it touches empty or rent-exempt.
    payee_receives(payee?, &checked.transfer, rent)?;
    kept("payer", balance?, checked.transfer.lamports.saturating_add(if sponsored { 0 } else { fee }), rent)?;
    if let Some(fee_payer_balance) = fee_payer_balance? {
        kept("fee payer", fee_payer_balance, fee, rent)?;
    }
    let signature = tx.signatures[0].to_string();
    let settle = match intent {
        Intent::Verify => Settle::Nothing,
        Intent::Settle => {
            // The transaction's blockhash is valid now, so it cannot land after the horizon of
            // the newest blockhash: past that height, a transaction the chain never saw has
            // expired.
            let (_, horizon) = rpc.latest_blockhash().await?;
            let raw = encode(tx)?;
            match settler {
                Settler::Facilitator => Settle::Broadcast(Outgoing::ready(signature.clone(), raw, Some(horizon))),
                Settler::Seller(_) => Settle::Handover { transaction: raw, fee: u128::from(fee), horizon },
            }
        }
    };
    Ok(Checked {
        settle,
        payer: Address::Solana(source.to_bytes()),
        pay_to: Address::Solana(checked.transfer.to.to_bytes()),
        asset: Asset::Native,
        amount: u128::from(checked.transfer.lamports),
        decimals,
        fee: Some(u128::from(fee)),
    })
}

/// A new payee must receive at least the rent-exempt minimum; a program or a sysvar none.
fn payee_receives(payee: Payee, transfer: &verify::NativeTransfer, rent: u64) -> Result<(), ProofError> {
    match payee {
        Payee::Unpayable => Err(refuse(
            Reason::InvalidPaymentRequirements,
            format!("{} is a program or a sysvar: it cannot receive SOL", transfer.to),
        )),
        Payee::New if transfer.lamports < rent => Err(refuse(
            Reason::InvalidPaymentRequirements,
            format!(
                "{} does not exist yet: a payment creating it must be at least {rent} lamports (the rent-exempt minimum)",
                transfer.to
            ),
        )),
        Payee::New | Payee::Funded => Ok(()),
    }
}

/// The `holder` (payer, or a separate fee payer) holding `balance` lamports can spend `spent`
/// and keep the rent-exempt minimum, or nothing.
fn kept(holder: &str, balance: u64, spent: u64, rent: u64) -> Result<(), ProofError> {
    if balance < spent {
        return Err(refuse(
            Reason::InsufficientFunds,
            format!("the {holder} holds {balance} lamports; the transaction needs {spent}"),
        ));
    }
    let left = balance - spent;
    if left > 0 && left < rent {
        return Err(refuse(
            Reason::InsufficientFunds,
            format!(
                "the transaction would leave the {holder} {left} lamports, below the {rent} an account must keep (spend all of it or less)"
            ),
        ));
    }
    Ok(())
}

/// What a payment to an account lands in.
enum Payee {
    /// It holds lamports: any amount can be added.
    Funded,
    /// It does not exist (or is empty): it must receive at least the rent-exempt minimum.
    New,
    /// A program or a sysvar: no transfer can credit it.
    Unpayable,
}

/// The cluster's rent-exempt minimum of an account without data, learned once (and remembered).
async fn rent_minimum(backend: &SolanaBackend) -> Result<u64, ProofError> {
    if let Some(rent) = backend.rent_minimum.get(&()) {
        return Ok(rent);
    }
    let rent = backend.rpc.rent_exempt_minimum().await?;
    backend.rent_minimum.insert((), rent);
    Ok(rent)
}

/// What `to` is as a payee; one found holding lamports is remembered for a while (a seller's
/// account rarely empties), so most payments do not ask.
async fn funded_payee(backend: &SolanaBackend, to: &Pubkey) -> Result<Payee, ProofError> {
    if backend.funded_payees.get(to).is_some() {
        return Ok(Payee::Funded);
    }
    Ok(match backend.rpc.payee(to).await? {
        Some(p) if p.unpayable => Payee::Unpayable,
        Some(p) if p.lamports > 0 => {
            backend.funded_payees.insert(*to, ());
            Payee::Funded
        }
        _ => Payee::New,
    })
}

/// A receipt: the sender's signature over the payment's terms, and the transfer on chain, sent
/// by that sender.
async fn receipt(
    rpc: &SolanaRpc,
    receipt: &NativeReceipt,
    pay_to: &Pubkey,
    terms: &Terms,
) -> Result<Checked, ProofError> {
    let bad = |message: &str| refuse(Reason::NativeReceipt, message);
    let from = pubkey(&receipt.from).ok_or_else(|| bad("receipt.from must be a Solana address"))?;
    if let Some(wanted) = &terms.resource
        && receipt.resource.as_deref() != Some(wanted)
    {
        return Err(bad("the receipt was made for another resource"));
    }
    let network = rpc.network();
    let message = receipt_message(network, &receipt.transaction, &terms.pay_to, receipt.resource.as_deref());
    let signed = receipt.signature.parse::<Signature>().is_ok_and(|s| s.verify(from.as_ref(), message.as_bytes()));
    if !signed {
        return Err(bad("the receipt's signature does not verify for its sender, recipient, network and resource"));
    }
    let tx_signature: Signature =
        receipt.transaction.parse().map_err(|_| bad("receipt.transaction is not a Solana signature"))?;
    let confirmed = rpc
        .confirmed_transaction(&tx_signature)
        .await?
        .ok_or_else(|| bad("the receipt's transaction is not confirmed on chain"))?;
    if let Some(error) = confirmed.error {
        return Err(refuse(Reason::NativeReceipt, format!("the receipt's transaction failed on chain: {error}")));
    }
    let keys = confirmed.transaction.message.static_account_keys();
    let signer = keys.iter().position(|k| *k == from).is_some_and(|i| confirmed.transaction.message.is_signer(i));
    if !signer {
        return Err(bad("the receipt's sender did not sign that transaction"));
    }
    let paid = verify::transferred(&confirmed.transaction, &from, pay_to);
    let decimals = ChainFamily::Solana.native_decimals();
    terms.price.check(u128::from(paid), decimals, Reason::SvmAmountMismatch)?;
    Ok(Checked {
        settle: Settle::Recorded { tx_id: receipt.transaction.clone() },
        payer: Address::Solana(from.to_bytes()),
        pay_to: terms.pay_to,
        asset: Asset::Native,
        amount: u128::from(paid),
        decimals,
        fee: confirmed.fee.map(u128::from),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::chains::refusal::refusal_reason as reason;

    /// The rent-exempt minimum at its edge: a new account receives at least it; a holder spends
    /// all its lamports or keeps at least it.
    #[test]
    fn the_rent_exempt_minimum_at_its_edges() {
        let to = |lamports| verify::NativeTransfer { from: Pubkey::new_unique(), to: Pubkey::new_unique(), lamports };
        assert_eq!(reason(payee_receives(Payee::New, &to(890_880), 890_880)), None);
        assert_eq!(reason(payee_receives(Payee::New, &to(890_879), 890_880)), Some(Reason::InvalidPaymentRequirements));
        assert_eq!(reason(payee_receives(Payee::Funded, &to(1), 890_880)), None);
        assert_eq!(
            reason(payee_receives(Payee::Unpayable, &to(10_000_000), 890_880)),
            Some(Reason::InvalidPaymentRequirements)
        );

        let rent = 890_880;
        assert_eq!(reason(kept("payer", 1_000_000, 1_000_000, rent)), None, "spends it all");
        assert_eq!(reason(kept("payer", 1_000_000, 1_000_001, rent)), Some(Reason::InsufficientFunds));
        assert_eq!(reason(kept("payer", 2_000_000, 2_000_000 - rent, rent)), None, "keeps exactly the minimum");
        let below = kept("payer", 2_000_000, 2_000_000 - rent + 1, rent);
        assert_eq!(reason(below), Some(Reason::InsufficientFunds), "keeps one lamport less");
        assert_eq!(reason(kept("payer", 10_000_000, 1, rent)), None);
    }
}
