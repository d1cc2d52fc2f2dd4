//! `tollgate-client`: the buyer side. A reqwest-based client that meets a 402, picks a way to pay
//! it can afford with its own keys under a spending cap, builds and signs the proof locally,
//! retries once with the payment header, and returns the paid answer with the decoded
//! settlement header. Keys never leave the process.
//!
//! It never pays twice for one request: a `503` ("payment pending") is retried with the same
//! proof, honouring `Retry-After`, a bounded number of times.
//!
//! Payment kinds so far: `exact-native` SOL (a signed System transfer; needs a Solana RPC for the
//! recent blockhash).
//!
//! ```no_run
//! # async fn run() -> Result<(), tollgate_client::PayError> {
//! use tollgate_client::{Buyer, Cap};
//! let keypair = solana_sdk::signature::Keypair::new();
//! let buyer = Buyer::new().with_solana(keypair, "http://127.0.0.1:8899").with_cap(Cap::whole("0.05")?);
//! let paid = buyer.get("http://127.0.0.1:8080/report").await?;
//! println!("{} (paid: {:?})", paid.body_text(), paid.payment);
//! # Ok(()) }
//! ```

use std::time::Duration;

use base64::Engine as _;
use solana_sdk::signature::Keypair;
use solana_sdk::signer::Signer as _;
use tollgate_protocol::x402::header::{
    PAYMENT_REQUIRED, PAYMENT_RESPONSE, PAYMENT_SIGNATURE, X_PAYMENT, X_PAYMENT_RESPONSE,
};
use tollgate_protocol::x402::schemes::ExactNativePayload;
use tollgate_protocol::x402::{
    Asset, PaymentPayload, PaymentPayloadV2, PaymentRequired, PaymentRequirements, ResourceInfo, SCHEME_EXACT_NATIVE,
    SettleResponse, V2,
};
use tollgate_protocol::{Address, AtomicAmount, ChainFamily, DecimalAmount, Network};

pub use tollgate_protocol as protocol;

/// Why a paid request did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum PayError {
    /// The request could not be sent or read.
    #[error("request failed: {0}")]
    Http(#[from] reqwest::Error),
    /// The 402 answer could not be read.
    #[error("the 402 answer is not an x402 payment request: {0}")]
    Challenge(String),
    /// No offered way to pay fits this buyer's keys.
    #[error("no offered way to pay fits this buyer (offered: {0})")]
    NoOption(String),
    /// The price is above the cap.
    #[error("the price {price} is above the spending cap of {cap}")]
    OverCap {
        /// What was asked, whole units.
        price: String,
        /// The cap, whole units.
        cap: String,
    },
    /// Building or signing the proof failed (chain unreachable, bad key).
    #[error("cannot build the payment: {0}")]
    Build(String),
    /// The seller refused the payment.
    #[error("the payment was refused ({status}): {reason}")]
    Refused {
        /// HTTP status.
        status: u16,
        /// The seller's reason.
        reason: String,
    },
    /// Still pending after the retries.
    #[error("the payment is still pending after {0} retries; it may yet confirm (retry with the same proof)")]
    StillPending(u32),
    /// A malformed cap.
    #[error("invalid spending cap: {0}")]
    Cap(String),
}

/// The most one request may cost, in whole units of the asset paid (SOL, ETH, token).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cap(DecimalAmount);

impl Cap {
    /// A cap of `amount` whole units (`"0.05"`).
    ///
    /// # Errors
    /// [`PayError::Cap`] for text that is not a non-negative decimal.
    pub fn whole(amount: &str) -> Result<Self, PayError> {
        DecimalAmount::parse(amount).map(Self).map_err(|e| PayError::Cap(e.to_string()))
    }

    /// Whether `atomic` units of an asset with `decimals` fit; a cap finer than the asset's
    /// decimals rounds down, never up.
    fn allows(&self, atomic: AtomicAmount, decimals: u8) -> bool {
        let cap = truncate(&self.0.to_string(), decimals);
        DecimalAmount::parse(&cap).and_then(|c| c.to_atomic(decimals)).is_ok_and(|c| atomic.get() <= c.get())
    }

    /// The cap in whole units.
    #[must_use]
    pub const fn amount(&self) -> &DecimalAmount {
        &self.0
    }
}

/// `text` with at most `decimals` digits after the point.
fn truncate(text: &str, decimals: u8) -> String {
    match text.split_once('.') {
        Some((whole, fraction)) => {
            let keep: String = fraction.chars().take(usize::from(decimals)).collect();
            if keep.is_empty() { whole.to_owned() } else { format!("{whole}.{keep}") }
        }
        None => text.to_owned(),
    }
}

/// What this buyer paid for a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaymentMade {
    /// Atomic units.
    pub amount: AtomicAmount,
    /// Whole units, for people.
    pub whole: DecimalAmount,
    /// What with.
    pub asset: Asset,
    /// Where.
    pub network: Network,
    /// The settling transaction (from the settlement header, or the proof's own).
    pub transaction: Option<String>,
}

/// A response to a (possibly paid) request.
#[derive(Debug)]
pub struct Paid {
    /// HTTP status.
    pub status: u16,
    /// Body.
    pub body: Vec<u8>,
    /// What was paid, when something was.
    pub payment: Option<PaymentMade>,
    /// The decoded settlement header, when the seller sent one.
    pub settlement: Option<SettleResponse>,
}

impl Paid {
    /// The body as text (lossy UTF-8).
    #[must_use]
    pub fn body_text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// A buyer: its keys, its RPC endpoints, its cap.
#[derive(Debug, Default)]
pub struct Buyer {
    http: reqwest::Client,
    solana: Option<(Keypair, String)>,
    cap: Option<Cap>,
    max_pending_retries: u32,
}

impl Buyer {
    /// A buyer without keys (it can only fetch free content).
    #[must_use]
    pub fn new() -> Self {
        Self { http: reqwest::Client::new(), solana: None, cap: None, max_pending_retries: 5 }
    }

    /// Pays on Solana with `keypair`, reading recent blockhashes from `rpc_url`.
    #[must_use]
    pub fn with_solana(mut self, keypair: Keypair, rpc_url: impl Into<String>) -> Self {
        self.solana = Some((keypair, rpc_url.into()));
        self
    }

    /// Never pays more than `cap` for one request.
    #[must_use]
    pub fn with_cap(mut self, cap: Cap) -> Self {
        self.cap = Some(cap);
        self
    }

    /// How often a pending payment is retried (with the same proof) before giving up.
    #[must_use]
    pub const fn with_pending_retries(mut self, retries: u32) -> Self {
        self.max_pending_retries = retries;
        self
    }

    /// `GET url`, paying a 402 once if one comes.
    ///
    /// # Errors
    /// [`PayError`] when the request fails, nothing fits, the price is over the cap, or the
    /// payment is refused or stays pending.
    pub async fn get(&self, url: &str) -> Result<Paid, PayError> {
        let first = self.http.get(url).send().await?;
        if first.status().as_u16() != 402 {
            let status = first.status().as_u16();
            return Ok(Paid { status, body: first.bytes().await?.to_vec(), payment: None, settlement: None });
        }
        let v2_header = first.headers().get(PAYMENT_REQUIRED).and_then(|h| h.to_str().ok()).map(str::to_owned);
        let body = first.bytes().await?;
        let challenge = read_challenge(v2_header.as_deref(), &body)?;
        let (requirement, resource) = self.choose(&challenge)?;
        let (header_name, header_value, made) = self.pay(&challenge, &requirement, &resource).await?;

        let mut retries = 0;
        loop {
            let answer = self.http.get(url).header(header_name, &header_value).send().await?;
            let status = answer.status().as_u16();
            if status == 503 && retries < self.max_pending_retries {
                retries += 1;
                let wait = answer
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(1)
                    .min(30);
                tokio::time::sleep(Duration::from_secs(wait)).await;
                continue;
            }
            if status == 503 {
                return Err(PayError::StillPending(retries));
            }
            let settlement = [X_PAYMENT_RESPONSE, PAYMENT_RESPONSE]
                .iter()
                .find_map(|name| answer.headers().get(*name))
                .and_then(|h| h.to_str().ok())
                .and_then(|h| tollgate_protocol::x402::header::decode::<SettleResponse>(h).ok());
            let body = answer.bytes().await?.to_vec();
            if !(200..400).contains(&status) {
                let reason = serde_json::from_slice::<serde_json::Value>(&body)
                    .ok()
                    .and_then(|v| v["error"].as_str().map(str::to_owned))
                    .unwrap_or_else(|| String::from_utf8_lossy(&body).into_owned());
                return Err(PayError::Refused { status, reason });
            }
            let transaction = settlement
                .as_ref()
                .map(|s| s.transaction.clone())
                .filter(|t| !t.is_empty())
                .or(made.transaction.clone());
            return Ok(Paid { status, body, payment: Some(PaymentMade { transaction, ..made }), settlement });
        }
    }

    /// The first offer this buyer can pay, within the cap.
    fn choose(&self, challenge: &PaymentRequired) -> Result<(PaymentRequirements, ResourceInfo), PayError> {
        let offers = challenge.requirements();
        let payable: Vec<_> = offers
            .iter()
            .filter(|(r, _)| {
                r.scheme == SCHEME_EXACT_NATIVE
                    && r.asset == Asset::Native
                    && r.network.family() == ChainFamily::Solana
                    && self.solana.is_some()
            })
            .collect();
        let Some((requirement, resource)) = payable.first() else {
            let offered: Vec<String> = offers.iter().map(|(r, _)| format!("{} on {}", r.scheme, r.network)).collect();
            return Err(PayError::NoOption(offered.join(", ")));
        };
        let decimals = requirement.network.family().native_decimals();
        if let Some(cap) = &self.cap
            && !cap.allows(requirement.amount, decimals)
        {
            return Err(PayError::OverCap {
                price: DecimalAmount::from_atomic(requirement.amount, decimals).to_string(),
                cap: cap.0.to_string(),
            });
        }
        Ok(((*requirement).clone(), (*resource).clone()))
    }

    /// Builds and signs the proof; the header to send it in, and what it pays.
    async fn pay(
        &self,
        challenge: &PaymentRequired,
        requirement: &PaymentRequirements,
        resource: &ResourceInfo,
    ) -> Result<(&'static str, String, PaymentMade), PayError> {
        let (keypair, rpc_url) = self.solana.as_ref().ok_or_else(|| PayError::NoOption("no Solana key".into()))?;
        let Address::Solana(to) = requirement.pay_to else {
            return Err(PayError::Build("payTo is not a Solana address".into()));
        };
        let lamports =
            u64::try_from(requirement.amount.get()).map_err(|_| PayError::Build("amount too large".into()))?;
        let rpc = solana_rpc_client::nonblocking::rpc_client::RpcClient::new_with_timeout_and_commitment(
            rpc_url.clone(),
            Duration::from_secs(10),
            solana_commitment_config::CommitmentConfig::confirmed(),
        );
        let blockhash = rpc.get_latest_blockhash().await.map_err(|e| PayError::Build(e.to_string()))?;
        let transfer = solana_system_interface::instruction::transfer(
            &keypair.pubkey(),
            &solana_sdk::pubkey::Pubkey::new_from_array(to),
            lamports,
        );
        // Two payments of the same amount to the same seller within one blockhash would be the
        // same transaction (signatures are deterministic): a memo makes each one unique.
        let memo = solana_sdk::instruction::Instruction::new_with_bytes(MEMO_PROGRAM, unique_memo().as_bytes(), vec![]);
        let tx = solana_sdk::transaction::Transaction::new_signed_with_payer(
            &[transfer, memo],
            Some(&keypair.pubkey()),
            &[keypair],
            blockhash,
        );
        let encoded = base64::engine::general_purpose::STANDARD
            .encode(bincode::serialize(&tx).map_err(|e| PayError::Build(e.to_string()))?);
        let native = ExactNativePayload::Transaction(encoded);
        let (name, payload) = match challenge {
            PaymentRequired::V1(_) => (X_PAYMENT, PaymentPayload::exact_native_v1(&requirement.network, &native)),
            PaymentRequired::V2(_) => (
                PAYMENT_SIGNATURE,
                PaymentPayload::V2(Box::new(PaymentPayloadV2 {
                    x402_version: V2,
                    resource: Some(resource.clone()),
                    accepted: requirement.clone(),
                    payload: native.to_value(),
                    extensions: serde_json::Map::new(),
                })),
            ),
        };
        let header = payload.to_header().map_err(|e| PayError::Build(e.to_string()))?;
        let made = PaymentMade {
            amount: requirement.amount,
            whole: DecimalAmount::from_atomic(requirement.amount, requirement.network.family().native_decimals()),
            asset: requirement.asset,
            network: requirement.network.clone(),
            transaction: tx.signatures.first().map(ToString::to_string),
        };
        Ok((name, header, made))
    }
}

/// SPL Memo program (v2).
const MEMO_PROGRAM: solana_sdk::pubkey::Pubkey =
    solana_sdk::pubkey::Pubkey::from_str_const("MemoSq4gqABAXKb96qnH8TysNcWxMyWCqXgDLGmfcHr");

/// A memo no other payment from this process carries: the time and a counter.
fn unique_memo() -> String {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("tollgate:{nanos}:{n}")
}

/// The seller's payment request: the v2 header when present (richer), else the v1 body.
fn read_challenge(v2_header: Option<&str>, body: &[u8]) -> Result<PaymentRequired, PayError> {
    if let Some(header) = v2_header {
        return tollgate_protocol::x402::header::decode::<PaymentRequired>(header)
            .map_err(|e| PayError::Challenge(e.to_string()));
    }
    serde_json::from_slice::<PaymentRequired>(body).map_err(|e| PayError::Challenge(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_compare_exactly() {
        let cap = Cap::whole("0.05").unwrap();
        assert!(cap.allows(AtomicAmount(50_000_000), 9));
        assert!(!cap.allows(AtomicAmount(50_000_001), 9));
        let fine = Cap::whole("0.0000000019").unwrap();
        assert!(fine.allows(AtomicAmount(1), 9), "rounded down to 1 lamport");
        assert!(!fine.allows(AtomicAmount(2), 9));
        assert!(Cap::whole("abc").is_err());
    }

    #[test]
    fn challenges_of_both_versions_are_read() {
        let v1 = serde_json::json!({"x402Version": 1, "error": "pay", "accepts": [{
            "scheme": "exact-native", "network": "solana-devnet", "maxAmountRequired": "10", "resource": "http://x/r",
            "description": "", "mimeType": "", "payTo": "9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin",
            "maxTimeoutSeconds": 60, "asset": "native"}]});
        let read = read_challenge(None, v1.to_string().as_bytes()).unwrap();
        assert_eq!(read.requirements()[0].0.amount, AtomicAmount(10));
        assert!(read_challenge(None, b"not json").is_err());
        assert!(read_challenge(Some("%%%"), b"").is_err());
    }
}
