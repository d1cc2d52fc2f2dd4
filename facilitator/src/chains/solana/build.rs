//! Native SOL transfers: the message, its priority fee, and the receipt that proves who paid.

use solana_sdk::pubkey::Pubkey;
use solana_sdk::signature::Keypair;
use solana_sdk::signer::Signer as _;
use tollgate_protocol::x402::PaymentPayload;
use tollgate_protocol::x402::schemes::{ExactNativePayload, NativeReceipt, receipt_message};
use tollgate_protocol::{Address, Network};

pub use tollgate_encoding::solana::{TRANSFER_COMPUTE_UNITS, Transfer};

/// The Solana public key of a validated Solana address.
#[must_use]
pub fn pubkey(address: &Address) -> Option<Pubkey> {
    match address {
        Address::Solana(bytes) => Some(Pubkey::new_from_array(*bytes)),
        Address::Evm(_) => None,
    }
}

/// An `exact-native` receipt for a confirmed transfer, signed by the key that sent it, as the
/// base64 `X-PAYMENT` value a seller accepts.
///
/// # Errors
/// Only if JSON serialization fails.
pub fn signed_receipt(
    sender: &Keypair,
    network: &Network,
    signature: &str,
    pay_to: &Address,
    resource: Option<&str>,
) -> Result<String, serde_json::Error> {
    let message = receipt_message(network, signature, pay_to, resource);
    let receipt = NativeReceipt {
        transaction: signature.to_owned(),
        from: Address::Solana(sender.pubkey().to_bytes()),
        signature: sender.sign_message(message.as_bytes()).to_string(),
        resource: resource.map(str::to_owned),
    };
    PaymentPayload::exact_native_v1(network, &ExactNativePayload::Receipt(receipt)).to_header()
}

#[cfg(test)]
mod tests {
    use super::*;
    use solana_sdk::signature::Signature;

    #[test]
    fn receipts_verify_against_the_sender_key() {
        let sender = Keypair::new();
        let pay_to = Address::Solana(Pubkey::new_unique().to_bytes());
        let network = Network::solana_devnet();
        let header = signed_receipt(&sender, &network, "5sig", &pay_to, Some("https://s.example/r")).unwrap();
        let payload = PaymentPayload::from_header(&header).unwrap();
        let ExactNativePayload::Receipt(r) = ExactNativePayload::from_value(payload.payload()).unwrap() else {
            panic!("not a receipt")
        };
        let sig: Signature = r.signature.parse().unwrap();
        let msg = receipt_message(&network, "5sig", &pay_to, Some("https://s.example/r"));
        assert!(sig.verify(&sender.pubkey().to_bytes(), msg.as_bytes()));
        assert!(!sig.verify(&sender.pubkey().to_bytes(), receipt_message(&network, "5sig", &pay_to, None).as_bytes()));
    }
}
