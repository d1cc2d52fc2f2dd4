//! A signed System transfer offered as an `exact-native` payment on Solana: decoded as the
//! facilitator decodes it (`verify::decode`), then through its checks that need no chain
//! (`verify::check_signed_transfer`).
//!
//! Random bytes almost never carry valid ed25519 signatures, so the input is a *message*
//! (bincode, legacy or v0) that this harness signs with the keys it knows (see [`sign`]): the
//! fuzzer explores what a signed transaction may contain, as a buyer who signs anything would.
//! An input whose first byte is `0xff` is instead a whole transaction, fed to the decoder as is.

use base64::Engine as _;
use solana_sdk::message::VersionedMessage;
use solana_sdk::pubkey::Pubkey;
use solana_sdk::signature::{Keypair, Signature};
use solana_sdk::signer::Signer as _;
use solana_sdk::transaction::VersionedTransaction;
use tollgate_facilitator::chains::solana::verify;

/// What this target feeds and what it asserts.
pub const ABOUT: &str = "Solana exact-native transfers (messages the harness signs, or raw transactions): what \
                         decodes re-encodes to its bytes; what passes holds one System transfer, from a signer, \
                         to the seller, of the lamports its data says, at least the price";

/// The price, lamports.
pub const PRICE: u64 = 10_000;

/// The keys the harness signs with: the payer's, another signer's, the sponsor's.
#[must_use]
pub fn keys() -> [Keypair; 3] {
    [1u8, 2, 3].map(|seed| Keypair::new_from_array([seed; 32]))
}

/// The seller.
#[must_use]
pub fn pay_to() -> Pubkey {
    Pubkey::new_from_array([0x5e; 32])
}

/// `message` signed by every key the harness knows among its signers, except `leave_empty`'s
/// slot (a sponsor signs last); a signer it does not know gets an empty signature.
#[must_use]
pub fn sign(message: VersionedMessage, leave_empty: Option<&Pubkey>) -> VersionedTransaction {
    let bytes = message.serialize();
    let keys = keys();
    let signers = usize::from(message.header().num_required_signatures);
    let signatures = message
        .static_account_keys()
        .iter()
        .take(signers)
        .map(|account| match keys.iter().find(|k| k.pubkey() == *account) {
            Some(key) if Some(account) != leave_empty => key.sign_message(&bytes),
            _ => Signature::default(),
        })
        .collect();
    VersionedTransaction { signatures, message }
}

/// The transaction an input stands for, as the base64 a payload carries.
pub fn transaction(data: &[u8], leave_empty: Option<&Pubkey>) -> Option<String> {
    let bytes = match data.split_first() {
        Some((0xff, raw)) => raw.to_vec(),
        _ => {
            let message: VersionedMessage = bincode::deserialize(data).ok()?;
            bincode::serialize(&sign(message, leave_empty)).ok()?
        }
    };
    Some(base64::engine::general_purpose::STANDARD.encode(bytes))
}

/// Runs one input; panics when a property breaks.
pub fn check(data: &[u8]) {
    let Some(encoded) = transaction(data, None) else { return };
    let Ok(tx) = verify::decode(&encoded) else { return };
    decodes_to_its_bytes(&tx, &encoded);
    let Ok(checked) = verify::check_signed_transfer(&tx, &pay_to(), PRICE) else { return };
    let message = &tx.message;
    let keys = message.static_account_keys();
    let system = tollgate_facilitator::chains::solana::verify::SYSTEM_PROGRAM;
    let transfers: Vec<_> = message
        .instructions()
        .iter()
        .filter(|ix| keys.get(usize::from(ix.program_id_index)) == Some(&system))
        .collect();
    assert_eq!(transfers.len(), 1, "a payment with {} System instructions passed", transfers.len());
    let ix = transfers[0];
    assert_eq!(ix.data.len(), 12, "a System instruction that is no transfer passed");
    assert_eq!(ix.data[..4], 2u32.to_le_bytes(), "a System instruction that is no transfer passed");
    let lamports = u64::from_le_bytes(ix.data[4..12].try_into().expect("eight bytes"));
    assert_eq!(checked.transfer.lamports, lamports, "the lamports checked are not the instruction's");
    assert!(lamports >= PRICE, "a payment of less than the price passed");
    let (from, to) = (usize::from(ix.accounts[0]), usize::from(ix.accounts[1]));
    assert_eq!(keys[to], pay_to(), "a payment to someone else passed");
    assert_eq!(checked.transfer.to, pay_to());
    assert_eq!(checked.transfer.from, keys[from]);
    assert!(message.is_signer(from), "a transfer whose source did not sign passed");
    all_signatures_verify(&tx, None);
}

/// A decoded transaction is the one its bytes encode: encoding it gives them back.
pub fn decodes_to_its_bytes(tx: &VersionedTransaction, encoded: &str) {
    let bytes = base64::engine::general_purpose::STANDARD.decode(encoded.trim()).expect("it decoded");
    assert_eq!(bincode::serialize(tx).expect("a transaction encodes"), bytes, "two encodings of one transaction");
}

/// Every signature but `except`'s verifies against the message, checked here with ed25519.
pub fn all_signatures_verify(tx: &VersionedTransaction, except: Option<usize>) {
    let bytes = tx.message.serialize();
    let keys = tx.message.static_account_keys();
    for (i, signature) in tx.signatures.iter().enumerate().filter(|(i, _)| Some(*i) != except) {
        assert!(signature.verify(keys[i].as_ref(), &bytes), "signature {i} does not verify, yet passed");
    }
}
