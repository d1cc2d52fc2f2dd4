//! Native SOL transfers: the message, its priority fee, and the receipt that proves who paid.

use solana_compute_budget_interface::ComputeBudgetInstruction;
use solana_sdk::hash::Hash;
use solana_sdk::message::Message;
use solana_sdk::pubkey::Pubkey;
use solana_sdk::signature::Keypair;
use solana_sdk::signer::Signer as _;
use tollgate_protocol::x402::PaymentPayload;
use tollgate_protocol::x402::schemes::{ExactNativePayload, NativeReceipt, receipt_message};
use tollgate_protocol::{Address, Network};

/// Compute units requested when a priority fee is set. A System transfer uses 150 and each
/// compute-budget instruction 150; the rest is margin. With 1,000 units the price in
/// micro-lamports per unit is exactly the fee in lamports times 1,000, so the fee is exact.
pub const TRANSFER_COMPUTE_UNITS: u32 = 1_000;

/// A native transfer to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transfer {
    /// Payer and fee payer.
    pub from: Pubkey,
    /// Recipient.
    pub to: Pubkey,
    /// Lamports moved.
    pub lamports: u64,
    /// Priority fee in lamports on top of the base fee.
    pub priority_fee: Option<u64>,
}

impl Transfer {
    /// The message: a compute-unit limit and price when there is a priority fee, then the System
    /// transfer.
    #[must_use]
    pub fn message(&self, blockhash: &Hash) -> Message {
        self.message_with_limit(blockhash, None)
    }

    /// The message with a compute-unit limit of `units` (none given: [`TRANSFER_COMPUTE_UNITS`]
    /// when there is a priority fee, else no limit). The limit changes the signature, not the fee: without
    /// a priority fee nothing is charged per unit, and with one the price is the fee spread over
    /// the units, rounded down, which the cluster's rounding up per transaction brings back to
    /// exactly the fee (for limits under 1,000,000 units).
    #[must_use]
    pub fn message_with_limit(&self, blockhash: &Hash, units: Option<u32>) -> Message {
        let fee = self.priority_fee.filter(|f| *f > 0);
        let units = units.or(fee.map(|_| TRANSFER_COMPUTE_UNITS));
        let mut instructions = Vec::with_capacity(3);
        if let Some(units) = units {
            instructions.push(ComputeBudgetInstruction::set_compute_unit_limit(units));
            if let Some(fee) = fee {
                let micro_lamports_per_unit = fee.saturating_mul(1_000_000) / u64::from(units.max(1));
                instructions.push(ComputeBudgetInstruction::set_compute_unit_price(micro_lamports_per_unit));
            }
        }
        instructions.push(solana_system_interface::instruction::transfer(&self.from, &self.to, self.lamports));
        Message::new_with_blockhash(&instructions, Some(&self.from), blockhash)
    }
}

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
    fn priority_fee_becomes_an_exact_compute_unit_price() {
        let t = Transfer {
            from: Pubkey::new_unique(),
            to: Pubkey::new_unique(),
            lamports: 10_000_000,
            priority_fee: Some(10_000),
        };
        let m = t.message(&Hash::default());
        assert_eq!(m.instructions.len(), 3);
        let price = &m.instructions[1].data;
        // set_compute_unit_price: tag 3, then u64 little endian.
        assert_eq!(price[0], 3);
        assert_eq!(u64::from_le_bytes(price[1..9].try_into().unwrap()), 10_000_000);
        assert_eq!(Transfer { priority_fee: None, ..t }.message(&Hash::default()).instructions.len(), 1);
    }

    /// Whatever the limit that makes a transfer unique, the priority fee charged is exactly the
    /// one asked: the cluster charges ceil(price × units / 1,000,000) lamports.
    #[test]
    fn a_unique_limit_keeps_the_priority_fee_exact() {
        let t =
            Transfer { from: Pubkey::new_unique(), to: Pubkey::new_unique(), lamports: 1, priority_fee: Some(10_000) };
        for units in [1_000u32, 1_001, 1_777, 54_321, 100_999, 999_999] {
            let m = t.message_with_limit(&Hash::default(), Some(units));
            let price = u64::from_le_bytes(m.instructions[1].data[1..9].try_into().unwrap());
            let charged = (u128::from(price) * u128::from(units)).div_ceil(1_000_000);
            assert_eq!(charged, 10_000, "{units} units");
        }
        let plain = Transfer { priority_fee: None, ..t }.message_with_limit(&Hash::default(), Some(1_234));
        assert_eq!(plain.instructions.len(), 2, "a limit, no price");
    }

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
