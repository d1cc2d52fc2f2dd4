//! `tollgate-client`: the buyer side. A reqwest-based client that meets a 402, picks a way to pay
//! it can afford with its own keys under a spending cap, builds and signs the proof locally,
//! retries once with the payment header, and returns the paid answer with the decoded
//! settlement header. Keys never leave the process.
//!
//! It never pays twice for one request: a `503` ("payment pending") is retried with the same
//! proof, honouring `Retry-After`, a bounded number of times.
//!
//! What it pays, each with a key of that chain and an RPC of the same network:
//!
//! * `exact-native` SOL: a System transfer it signs (and pays the fee of);
//! * x402 `exact` SPL tokens: a `TransferChecked` from its associated token account, the fee paid
//!   by the seller's facilitator (`extra.feePayer`);
//! * `exact-native` ETH: an EIP-1559 transfer it signs; the facilitator broadcasts it;
//! * x402 `exact` EVM tokens: an EIP-3009 `transferWithAuthorization` it signs off chain;
//! * any ERC-20 through Permit2: `exact` (`extra.assetTransferMethod: "permit2"`) and the
//!   metered `upto` (a permit for at most the price; the seller charges what the request used,
//!   and [`PaymentMade::amount`] is that charge). Without a Permit2 allowance it offers a signed
//!   EIP-2612 permit (when the token has one and the seller declared `eip2612GasSponsoring`) or
//!   approves Permit2 once on chain, paying that gas itself ([`PaymentMade::approval`]).
//!
//! Offers are tried in the seller's order; the first one its keys can pay within the cap wins.
//! The cap is compared in the asset's own units (decimals read from the chain for tokens).
//!
//! # Layout
//!
//! | module | what |
//! |---|---|
//! | this file | [`Buyer`]: the 402 met, an offer chosen under the cap, the proof sent, `503` followed; [`Buyer::authorize`] / [`Buyer::settled`] / [`Buyer::unsettled`] for payments met elsewhere (MCP) |
//! | [`wallet`] | the [`Wallet`] trait, and each chain's local wallet (`solana`, `evm`): decimals read, the proof built and signed (encodings from `tollgate-encoding`) |
//! | `budget` | [`Budget`]: limits kept in a SQLite file, the spend log |
//! | `channels` | payment channels (x402 `batch-settlement`), chain-neutral: the count kept in the budget file, deposits within the limit, the client rules, refunds and withdrawals ([`ChannelAccount`]); `evm/channels.rs` signs them on EVM ([`ChannelWallet`]) |
//! | `middleware` | [`PaymentMiddleware`]: the buyer in a program's own `reqwest` client (`reqwest-middleware`) |
//! | `src/bin/tollgate-pay.rs` | the command line |
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

use solana_sdk::signature::Keypair;
use tollgate_protocol::x402::header::{
    PAYMENT_REQUIRED, PAYMENT_RESPONSE, PAYMENT_SIGNATURE, X_PAYMENT, X_PAYMENT_RESPONSE,
};
use tollgate_protocol::x402::{
    Asset, PaymentPayload, PaymentPayloadV1, PaymentPayloadV2, PaymentRequired, PaymentRequirements, ResourceInfo,
    SCHEME_UPTO, SettleResponse, V1, V2, payment_identifier,
};
use tollgate_protocol::{Address, AtomicAmount, ChainFamily, DecimalAmount, Network, siwx};

mod budget;
mod channels;
pub mod discovery;
mod evm;
mod middleware;
mod solana;
pub mod wallet;

pub use alloy::signers::local::PrivateKeySigner;
pub use budget::{Budget, Limit, Spend};
pub use channels::{ChannelAccount, Refunded};
pub use middleware::{PaymentMiddleware, SignedIn};
pub use tollgate_protocol as protocol;
pub use wallet::{Channel, ChannelWallet, OnChain, Proof, Wallet};

/// Why a paid request did not succeed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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
    /// A header that cannot be sent.
    #[error("invalid header: {0}")]
    Header(String),
    /// The price does not fit what is left of a budget.
    #[error("the price {price} does not fit the budget of {limit} ({spent} spent)")]
    OverBudget {
        /// What was asked, whole units.
        price: String,
        /// What the limit's window has spent already, whole units.
        spent: String,
        /// The limit.
        limit: String,
    },
    /// The budget file cannot be used.
    #[error("{0}")]
    Budget(String),
    /// The request's body cannot be sent again with the payment (it streams).
    #[error("{0}")]
    Body(String),
    /// A payment channel's deposit needs more than the deposit limit allows
    /// ([`Buyer::with_deposit_cap`], `tollgate-pay --deposit-max`). Nothing was signed.
    #[error(
        "the payment channel needs a deposit of {needed}, above the deposit limit of {limit}: raise it \
         (tollgate-pay --deposit-max, Buyer::with_deposit_cap)"
    )]
    DepositOverLimit {
        /// The least deposit that pays the request, whole units.
        needed: String,
        /// The limit, whole units.
        limit: String,
    },
    /// A payment channel cannot be used (the buyer stopped signing on it, nothing is left, it
    /// is unknown).
    #[error("payment channel: {0}")]
    Channel(String),
    /// A manifest or a catalog could not be read ([`Buyer::discover`], [`Buyer::search`]).
    #[error("discovery: {0}")]
    Discovery(String),
    /// No cap or budget limits what this offer would take, and the buyer was not told to pay
    /// without one ([`Buyer::without_cap`], `tollgate-pay --no-cap`). Nothing was signed.
    #[error(
        "refusing to pay {price} on {network} to {pay_to} without a spending cap: give one (tollgate-pay --max \
         {suggested}, Buyer::with_cap), a budget limit in this asset, or pay uncapped on purpose (--no-cap, \
         Buyer::without_cap)"
    )]
    Uncapped {
        /// What was asked, whole units.
        price: String,
        /// The network it is asked on.
        network: String,
        /// Who would be paid.
        pay_to: String,
        /// A `--max` that would take it.
        suggested: String,
    },
}

/// What a [`Cap`] is counted in.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CapAsset {
    /// Whatever asset the chosen offer asks: 1 is 1 SOL, 1 ETH or 1 token, as the seller lists
    /// them. Only for sellers of one asset.
    Any,
    /// A chain family's native currency (SOL, ETH): offers in anything else are not taken.
    Native(ChainFamily),
    /// One token (an SPL mint or an ERC-20 contract): offers in anything else are not taken.
    Token(Address),
    /// Tokens whose contract says this symbol (an ERC-20's `symbol()`, compared without case):
    /// `0.05USDC`. Offers in anything else are not taken; SPL mints keep no symbol on chain, so
    /// Solana tokens are named by address.
    Symbol(String),
}

/// The most one request may cost, in whole units of an asset named with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cap {
    amount: DecimalAmount,
    asset: CapAsset,
}

impl Cap {
    /// A cap of `amount` whole units of whichever asset the chosen offer asks (`"0.05"`):
    /// prefer [`Cap::parse`] or [`Cap::in_asset`], which name the asset.
    ///
    /// # Errors
    /// [`PayError::Cap`] for text that is not a non-negative decimal.
    pub fn whole(amount: &str) -> Result<Self, PayError> {
        Self::in_asset(amount, CapAsset::Any)
    }

    /// A cap of `amount` whole units of `asset`; offers in other assets are not taken.
    ///
    /// # Errors
    /// [`PayError::Cap`] for text that is not a non-negative decimal.
    pub fn in_asset(amount: &str, asset: CapAsset) -> Result<Self, PayError> {
        let amount = DecimalAmount::parse(amount).map_err(|e| PayError::Cap(e.to_string()))?;
        Ok(Self { amount, asset })
    }

    /// A cap that names its asset: `0.01SOL`, `0.001ETH`, `0.05USDC` (a token by its symbol), or
    /// `1.5@<token address>`.
    ///
    /// # Errors
    /// [`PayError::Cap`] for an amount without an asset, or anything else malformed.
    pub fn parse(text: &str) -> Result<Self, PayError> {
        let text = text.trim();
        if let Some((amount, token)) = text.split_once('@') {
            let token: Address = token.trim().parse().map_err(|e| PayError::Cap(format!("{token}: {e}")))?;
            return Self::in_asset(amount.trim(), CapAsset::Token(token));
        }
        let split = text.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(text.len());
        let (amount, symbol) = text.split_at(split);
        let family = match symbol.to_ascii_uppercase().as_str() {
            "SOL" => ChainFamily::Solana,
            "ETH" => ChainFamily::Evm,
            "" => {
                return Err(PayError::Cap(format!(
                    "{text:?} names no asset: write 0.01SOL, 0.001ETH, 0.05USDC or 1.5@<token address>"
                )));
            }
            other if (1..=11).contains(&other.len()) && other.bytes().all(|b| b.is_ascii_alphanumeric()) => {
                return Self::in_asset(amount.trim(), CapAsset::Symbol(other.to_owned()));
            }
            other => {
                return Err(PayError::Cap(format!(
                    "unknown asset {other:?}: name SOL, ETH, a token's symbol, or a token as <amount>@<token address>"
                )));
            }
        };
        Self::in_asset(amount.trim(), CapAsset::Native(family))
    }

    /// Whether the cap is counted in `requirement`'s asset (never for a cap by symbol: see
    /// [`Buyer`]'s own check, which asks the wallet for the symbol).
    fn counts(&self, requirement: &PaymentRequirements) -> bool {
        match (&self.asset, requirement.asset) {
            (CapAsset::Any, _) => true,
            (CapAsset::Native(family), Asset::Native) => *family == requirement.network.family(),
            (CapAsset::Token(token), Asset::Token(asked)) => *token == asked,
            _ => false,
        }
    }

    /// Whether `atomic` units of an asset with `decimals` fit; a cap finer than the asset's
    /// decimals rounds down, never up.
    fn allows(&self, atomic: AtomicAmount, decimals: u8) -> bool {
        self.atomic(decimals).is_some_and(|c| atomic.get() <= c.get())
    }

    /// The cap in atomic units of an asset with `decimals` (a finer cap rounded down).
    fn atomic(&self, decimals: u8) -> Option<AtomicAmount> {
        let cap = truncate(&self.amount.to_string(), decimals);
        DecimalAmount::parse(&cap).and_then(|c| c.to_atomic(decimals)).ok()
    }

    /// The cap in whole units.
    #[must_use]
    pub const fn amount(&self) -> &DecimalAmount {
        &self.amount
    }

    /// What it is counted in.
    #[must_use]
    pub const fn asset(&self) -> &CapAsset {
        &self.asset
    }
}

impl std::fmt::Display for Cap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.asset {
            CapAsset::Any => write!(f, "{}", self.amount),
            CapAsset::Native(family) => write!(f, "{} {}", self.amount, family.native_symbol()),
            CapAsset::Token(token) => write!(f, "{} of token {token}", self.amount),
            CapAsset::Symbol(symbol) => write!(f, "{} {symbol}", self.amount),
        }
    }
}

/// `amount` of `requirement`'s asset, for people.
fn priced(amount: &DecimalAmount, requirement: &PaymentRequirements) -> String {
    match requirement.asset {
        Asset::Native => format!("{amount} {}", requirement.network.family().native_symbol()),
        Asset::Token(token) => format!("{amount} of token {token}"),
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
#[non_exhaustive]
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
    /// For a metered price (`upto`): the most authorized; `amount` is what the seller charged
    /// (its settlement header's `amount`).
    pub authorized: Option<AtomicAmount>,
    /// The buyer's one-time approval of Permit2 sent before paying, when it had none.
    pub approval: Option<String>,
    /// The payment channel it was paid from (x402 `batch-settlement`): `transaction` is then
    /// its deposit's, when this request made one.
    pub channel: Option<String>,
}

/// A response to a (possibly paid) request.
#[derive(Debug)]
#[non_exhaustive]
pub struct Paid {
    /// HTTP status.
    pub status: u16,
    /// The answer's headers.
    pub headers: reqwest::header::HeaderMap,
    /// Body.
    pub body: Vec<u8>,
    /// What was paid, when something was.
    pub payment: Option<PaymentMade>,
    /// The decoded settlement header, when the seller sent one.
    pub settlement: Option<SettleResponse>,
    /// The wallet that signed in instead of paying (a pass bought before: x402
    /// `sign-in-with-x`), when one did.
    pub signed_in: Option<String>,
}

impl Paid {
    /// The body as text (lossy UTF-8).
    #[must_use]
    pub fn body_text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// A request to send, paying a 402 if one comes: any method, headers, and a body held in
/// memory (sent again whole with the payment).
#[derive(Debug, Clone)]
pub struct Request {
    method: reqwest::Method,
    url: String,
    headers: reqwest::header::HeaderMap,
    body: Option<bytes::Bytes>,
}

impl Request {
    /// `method url`, without headers or body.
    #[must_use]
    pub fn new(method: reqwest::Method, url: impl Into<String>) -> Self {
        Self { method, url: url.into(), headers: reqwest::header::HeaderMap::new(), body: None }
    }

    /// `GET url`.
    #[must_use]
    pub fn get(url: impl Into<String>) -> Self {
        Self::new(reqwest::Method::GET, url)
    }

    /// Adds a header (sent with both the first request and the paid one).
    ///
    /// # Errors
    /// [`PayError::Header`] for a name or value HTTP does not allow, or a payment header (the
    /// buyer writes those).
    pub fn header(mut self, name: &str, value: &str) -> Result<Self, PayError> {
        let name = reqwest::header::HeaderName::try_from(name.trim())
            .map_err(|_| PayError::Header(format!("{name:?} is not a header name")))?;
        if [X_PAYMENT, PAYMENT_SIGNATURE].iter().any(|p| name.as_str().eq_ignore_ascii_case(p)) {
            return Err(PayError::Header(format!("{name} is written by the buyer, not given")));
        }
        let value = reqwest::header::HeaderValue::try_from(value.trim())
            .map_err(|_| PayError::Header(format!("the value of {name} is not allowed in a header")))?;
        self.headers.append(name, value);
        Ok(self)
    }

    /// The body, sent again whole with the payment.
    #[must_use]
    pub fn body(mut self, body: impl Into<bytes::Bytes>) -> Self {
        self.body = Some(body.into());
        self
    }

    /// The URL.
    #[must_use]
    pub fn url(&self) -> &str {
        &self.url
    }

    fn send_with(&self, http: &reqwest::Client, payment: Option<(&str, &str)>) -> reqwest::RequestBuilder {
        let mut builder = http.request(self.method.clone(), &self.url).headers(self.headers.clone());
        if let Some(body) = &self.body {
            builder = builder.body(body.clone());
        }
        if let Some((name, value)) = payment {
            builder = builder.header(name, value);
        }
        builder
    }
}

/// What a request would cost, asked without paying ([`Buyer::quote`]).
#[derive(Debug)]
#[non_exhaustive]
pub struct Quote {
    /// Every offer of the seller, for people, in its order.
    pub offers: Vec<String>,
    /// The offer this buyer would pay, or why none.
    pub chosen: Result<Planned, PayError>,
}

/// The offer a buyer would pay.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Planned {
    /// The scheme (`exact-native`, `exact`, `upto`).
    pub scheme: String,
    /// Atomic units (for `upto`, the most).
    pub amount: AtomicAmount,
    /// Whole units, for people.
    pub whole: DecimalAmount,
    /// What with.
    pub asset: Asset,
    /// Where.
    pub network: Network,
    /// To whom.
    pub pay_to: Address,
}

/// A payment built and signed for one payment request, not yet settled ([`Buyer::authorize`]).
#[derive(Debug)]
pub struct Authorization {
    payload: PaymentPayload,
    header_name: &'static str,
    header_value: String,
    made: PaymentMade,
    decimals: u8,
    requirement: PaymentRequirements,
    reservation: Option<budget::Reservation>,
    /// A payment from a channel: its count before, what was signed, and the channel's turn.
    channel: Option<channels::ChannelUse>,
}

impl Authorization {
    /// The payment payload (for the MCP transport's `_meta["x402/payment"]`).
    #[must_use]
    pub const fn payload(&self) -> &PaymentPayload {
        &self.payload
    }

    /// The HTTP header that carries it: `X-PAYMENT` (x402 v1) or `PAYMENT-SIGNATURE` (v2), and
    /// its value.
    #[must_use]
    pub fn header(&self) -> (&'static str, &str) {
        (self.header_name, &self.header_value)
    }

    /// What it pays (for a metered price, the most authorized).
    #[must_use]
    pub const fn payment(&self) -> &PaymentMade {
        &self.made
    }

    /// The payment's `payment-identifier` id, when the seller takes the extension: the paid
    /// request may then be sent again (its answer lost) without running it twice.
    #[must_use]
    pub fn payment_id(&self) -> Option<&str> {
        match &self.payload {
            PaymentPayload::V2(p) => payment_identifier::id_of(&p.extensions).ok().flatten(),
            PaymentPayload::V1(_) => None,
        }
    }
}

/// How long to wait before retrying a pending payment the seller asked to retry after
/// `seconds`: at most 30 s.
#[must_use]
pub fn pending_wait(seconds: u64) -> Duration {
    Duration::from_secs(seconds.min(30))
}

/// Follows a redirect only to the origin the request was sent to: a payment header (and the
/// body it pays for) never reaches another origin. Another origin's redirect is answered as is.
/// The policy of every client that sends payments ([`Buyer`], [`PaymentMiddleware::client`]).
#[must_use]
pub fn same_origin_redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let first = attempt.previous().first().map(reqwest::Url::origin);
        if attempt.previous().len() > 10 {
            attempt.error("more than 10 redirects")
        } else if first.is_some_and(|origin| origin != attempt.url().origin()) {
            attempt.stop()
        } else {
            attempt.follow()
        }
    })
}

/// A buyer: its keys, its RPC endpoints, its cap.
#[derive(Debug, Default)]
pub struct Buyer {
    http: reqwest::Client,
    solana: Option<std::sync::Arc<dyn Wallet>>,
    evm: Option<std::sync::Arc<dyn Wallet>>,
    cap: Option<Cap>,
    /// Pays offers that no cap or budget limit counts (told so: [`Buyer::without_cap`]).
    uncapped: bool,
    budget: Option<Budget>,
    max_pending_retries: u32,
    /// The most one channel deposit may lock ([`Self::with_deposit_cap`]).
    deposit_cap: Option<Cap>,
    /// The payment channels' counts (kept in the budget file when there is one).
    book: channels::ChannelBook,
}

/// The offer chosen, with the decimals of its asset.
struct Choice {
    requirement: PaymentRequirements,
    resource: ResourceInfo,
    decimals: u8,
}

impl Buyer {
    /// A buyer without keys (it can only fetch free content).
    #[must_use]
    pub fn new() -> Self {
        let http = reqwest::Client::builder().redirect(same_origin_redirects()).build().unwrap_or_default();
        Self {
            http,
            solana: None,
            evm: None,
            cap: None,
            uncapped: false,
            budget: None,
            max_pending_retries: 5,
            deposit_cap: None,
            book: channels::ChannelBook::default(),
        }
    }

    /// Pays on Solana with `keypair`, reading the cluster, recent blockhashes and token mints
    /// from `rpc_url`. Only offers on that RPC's cluster are paid.
    #[must_use]
    pub fn with_solana(mut self, keypair: Keypair, rpc_url: impl Into<String>) -> Self {
        self.solana = Some(std::sync::Arc::new(solana::SolanaWallet::new(keypair, rpc_url.into())));
        self
    }

    /// Pays on an EVM chain with `signer`, reading the chain id, nonces, fees and tokens from
    /// `rpc_url`. Only offers on that node's chain are paid.
    ///
    /// # Errors
    /// [`PayError::Build`] when `rpc_url` is not a URL.
    pub fn with_evm(mut self, signer: PrivateKeySigner, rpc_url: &str) -> Result<Self, PayError> {
        self.evm = Some(std::sync::Arc::new(evm::EvmWallet::new(signer, rpc_url)?));
        Ok(self)
    }

    /// Pays on `wallet`'s chain family with it (any [`Wallet`]: a remote signer, a hardware
    /// key), instead of a local key given before.
    #[must_use]
    pub fn with_wallet(mut self, wallet: std::sync::Arc<dyn Wallet>) -> Self {
        match wallet.family() {
            ChainFamily::Solana => self.solana = Some(wallet),
            ChainFamily::Evm => self.evm = Some(wallet),
        }
        self
    }

    /// The wallet that pays on `family`.
    fn wallet(&self, family: ChainFamily) -> Option<&std::sync::Arc<dyn Wallet>> {
        match family {
            ChainFamily::Solana => self.solana.as_ref(),
            ChainFamily::Evm => self.evm.as_ref(),
        }
    }

    /// Never pays more than `cap` for one request. A buyer pays nothing without a cap, or a
    /// budget limit in the offer's asset ([`Self::with_budget`]), unless told to
    /// ([`Self::without_cap`]): an offer no limit counts is refused with [`PayError::Uncapped`]
    /// before anything is signed.
    #[must_use]
    pub fn with_cap(mut self, cap: Cap) -> Self {
        self.cap = Some(cap);
        self
    }

    /// Pays whatever a seller asks, within a budget if one is given: without a cap, every offer
    /// its keys can pay is taken at any price. Say so only where the prices are trusted.
    #[must_use]
    pub const fn without_cap(mut self) -> Self {
        self.uncapped = true;
        self
    }

    /// Pays only within `budget`'s limits, and records every payment in its file: each is
    /// reserved before its proof is signed, so concurrent requests and restarts never exceed a
    /// limit.
    #[must_use]
    pub fn with_budget(mut self, budget: Budget) -> Self {
        self.budget = Some(budget);
        self
    }

    /// How often a pending payment is retried (with the same proof) before giving up.
    #[must_use]
    pub const fn with_pending_retries(mut self, retries: u32) -> Self {
        self.max_pending_retries = retries;
        self
    }

    /// The buyer's Solana address, when it has a Solana key.
    #[must_use]
    pub fn solana_address(&self) -> Option<String> {
        self.solana.as_ref().map(|wallet| wallet.address())
    }

    /// The buyer's EVM address (checksummed), when it has an EVM key.
    #[must_use]
    pub fn evm_address(&self) -> Option<String> {
        self.evm.as_ref().map(|wallet| wallet.address())
    }

    /// `GET url`, paying a 402 once if one comes.
    ///
    /// # Errors
    /// [`PayError`] when the request fails, nothing fits, the price is over the cap, or the
    /// payment is refused or stays pending.
    pub async fn get(&self, url: &str) -> Result<Paid, PayError> {
        self.send(&Request::get(url)).await
    }

    /// Sends `request`, paying a 402 once if one comes (the request is sent again, body and
    /// headers whole, with the payment). Redirects are followed only within the request's origin.
    ///
    /// # Errors
    /// [`PayError`] when the request fails, nothing fits, the price is over the cap, or the
    /// payment is refused or stays pending.
    pub async fn send(&self, request: &Request) -> Result<Paid, PayError> {
        let challenge = match self.challenge(request).await? {
            Ok(challenge) => challenge,
            Err(free) => return Ok(free),
        };
        // A pass bought before: its wallet signs in instead of paying again; refused (no pass
        // yet), the seller's new payment request is paid.
        let challenge = match self.sign_in(&challenge, request.url()).await {
            Some((header, wallet)) => {
                let answer = request.send_with(&self.http, Some((siwx::HEADER, &header))).send().await?;
                let status = answer.status().as_u16();
                if status != 402 {
                    let headers = answer.headers().clone();
                    let body = answer.bytes().await?.to_vec();
                    let signed_in = (200..400).contains(&status).then_some(wallet);
                    return Ok(Paid { status, headers, body, payment: None, settlement: None, signed_in });
                }
                let v2 = answer.headers().get(PAYMENT_REQUIRED).and_then(|h| h.to_str().ok()).map(str::to_owned);
                read_challenge(v2.as_deref(), &answer.bytes().await?)?
            }
            None => challenge,
        };
        // A payment channel's count the seller corrects is paid again once, for the seller's first
        // payment request (the corrective one only says the count).
        let mut corrections = 1;
        loop {
            let authorization = self.authorize(&challenge, request.url()).await?;
            // Sent again when its answer is lost: a request that is idempotent, or one the seller
            // answers again by its payment identifier.
            let resend = authorization.payment_id().is_some() || request.method.is_idempotent();
            let (status, headers, body, settlement) =
                match self.send_paid(request, authorization.header(), resend).await {
                    Ok(answer) => answer,
                    Err(e) => {
                        self.unsettled(authorization).await;
                        return Err(e);
                    }
                };
            if (200..400).contains(&status) {
                let made = self.settled(authorization, settlement.as_ref()).await;
                return Ok(Paid { status, headers, body, payment: Some(made), settlement, signed_in: None });
            }
            let refusal = refusal(status, &body);
            let again = (status == 402)
                .then(|| headers.get(PAYMENT_REQUIRED).and_then(|h| h.to_str().ok()))
                .map(|v2| read_challenge(v2, &body));
            match again {
                Some(Ok(again)) => {
                    if !(self.refused(authorization, &again).await && corrections > 0) {
                        return Err(refusal);
                    }
                    corrections -= 1;
                }
                _ => {
                    self.unsettled(authorization).await;
                    return Err(refusal);
                }
            }
        }
    }

    /// Builds and signs a payment for `challenge`, met at `url` (a seller's 402, or a paid MCP
    /// tool's payment-required result): the first offer, in the seller's order, that this
    /// buyer's keys can pay within its cap, reserved in its budget (counted for `url`'s origin)
    /// before it is signed. Send it, then end it with [`Self::settled`] or [`Self::unsettled`].
    ///
    /// # Errors
    /// [`PayError`] when nothing fits (keys, cap, budget) or the proof cannot be built; nothing
    /// is then reserved.
    pub async fn authorize(&self, challenge: &PaymentRequired, url: &str) -> Result<Authorization, PayError> {
        let (choice, reservation) = self.reserve(challenge, url).await?;
        let built = if choice.requirement.scheme == tollgate_protocol::x402::batch::SCHEME {
            self.pay_from_channel(challenge, &choice, url)
                .await
                .map(|(name, value, payload, made, used)| (name, value, payload, made, Some(used)))
        } else {
            self.pay(challenge, &choice).await.map(|(name, value, payload, made)| (name, value, payload, made, None))
        };
        match built {
            Ok((header_name, header_value, payload, made, channel)) => {
                let decimals = choice.decimals;
                let requirement = choice.requirement;
                Ok(Authorization {
                    payload,
                    header_name,
                    header_value,
                    made,
                    decimals,
                    requirement,
                    reservation,
                    channel,
                })
            }
            Err(e) => {
                // No proof was made: nothing can leave the buyer.
                if let (Some(budget), Some(reservation)) = (&self.budget, reservation) {
                    budget.release(reservation).await;
                }
                Err(e)
            }
        }
    }

    /// A signed `sign-in-with-x` message for `challenge` (met at `url`), as the
    /// `SIGN-IN-WITH-X` header, and the wallet that signed it: when the seller sells a pass and
    /// declares the sign-in, for a chain this buyer holds a wallet of, bound to `url`'s own
    /// origin (a message for another site is never signed). `None` otherwise: pay instead.
    pub async fn sign_in(&self, challenge: &PaymentRequired, url: &str) -> Option<(String, String)> {
        let PaymentRequired::V2(c) = challenge else { return None };
        let declared: siwx::Declaration = serde_json::from_value(c.extensions.get(siwx::EXTENSION)?.clone()).ok()?;
        let passes: Vec<&PaymentRequirements> =
            c.accepts.iter().filter(|r| r.extra.as_ref().is_some_and(|e| e.get("pass").is_some())).collect();
        if passes.is_empty() {
            return None;
        }
        // Bound to the site asked (an MCP server over stdio has no web origin to compare).
        if let Some(asked) = siwx::Origin::of_url(url) {
            let bound = siwx::Origin::of_url(&declared.info.uri).is_some_and(|o| o == asked);
            if !bound || declared.info.domain != asked.host {
                return None;
            }
        }
        // A chain a pass is sold on first, then any this buyer has a wallet of.
        let mut chains: Vec<&siwx::SupportedChain> = declared.supported_chains.iter().collect();
        chains.sort_by_key(|chain| !passes.iter().any(|r| r.network.to_string() == chain.chain_id));
        for chain in chains {
            let Some(network) = chain.chain_id.parse::<Network>().ok() else { continue };
            let Some(wallet) = self.wallet(network.family()) else { continue };
            let mut answer = siwx::SignIn::answer(&declared.info, chain, wallet.address(), String::new());
            let message = siwx::message(&answer)?;
            answer.signature = wallet.sign_message(&message).await.ok()?;
            return Some((answer.to_header(), wallet.address()));
        }
        None
    }

    /// The seller served the request `authorization` paid, answering `settlement` (its
    /// settlement header, or the MCP result's `x402/payment-response`): what was paid, recorded
    /// in the budget at what was charged. A metered price is charged the settlement's `amount`,
    /// never more than authorized.
    pub async fn settled(&self, authorization: Authorization, settlement: Option<&SettleResponse>) -> PaymentMade {
        let Authorization { made, decimals, reservation, channel, .. } = authorization;
        let transaction =
            settlement.map(|s| s.transaction.clone()).filter(|t| !t.is_empty()).or_else(|| made.transaction.clone());
        let charged = match (channel, made.authorized, settlement.and_then(|s| s.amount)) {
            (Some(used), ..) => self.channel_settled(used, settlement).await,
            (None, Some(most), Some(charged)) if charged.get() <= most.get() => charged,
            _ => made.amount,
        };
        let whole = DecimalAmount::from_atomic(charged, decimals);
        let made = PaymentMade { transaction, amount: charged, whole, ..made };
        if let (Some(budget), Some(reservation)) = (&self.budget, reservation) {
            budget.paid(reservation, made.amount, made.transaction.clone()).await;
        }
        made
    }

    /// The proof of `authorization` was sent (or may have been) and the request was not served
    /// as paid: refused, still pending, or no answer. It stays counted in the budget (a proof
    /// that left the buyer may yet settle, whatever the seller said).
    pub async fn unsettled(&self, authorization: Authorization) {
        if let Some(wallet) = self.wallet(authorization.requirement.network.family()) {
            wallet.unsettled(&authorization.requirement).await;
        }
        if let Some(used) = authorization.channel {
            self.channel_unsettled(used).await;
        }
    }

    /// What `request` would cost: the seller's offers and the one this buyer would pay, paying
    /// nothing. `None` when the seller does not ask for a payment.
    ///
    /// # Errors
    /// [`PayError`] when the request fails or its 402 cannot be read.
    pub async fn quote(&self, request: &Request) -> Result<Option<Quote>, PayError> {
        let Ok(challenge) = self.challenge(request).await? else { return Ok(None) };
        let offers = challenge.requirements().iter().map(|(r, _)| describe(r)).collect();
        let chosen = self.choose(&challenge).await.map(|c| Planned {
            scheme: c.requirement.scheme.clone(),
            amount: c.requirement.amount,
            whole: DecimalAmount::from_atomic(c.requirement.amount, c.decimals),
            asset: c.requirement.asset,
            network: c.requirement.network.clone(),
            pay_to: c.requirement.pay_to,
        });
        Ok(Some(Quote { offers, chosen }))
    }

    /// Sends `request` unpaid: the seller's payment request when it answers 402, else its answer.
    async fn challenge(&self, request: &Request) -> Result<Result<PaymentRequired, Paid>, PayError> {
        let first = request.send_with(&self.http, None).send().await?;
        let status = first.status().as_u16();
        if status != 402 {
            let headers = first.headers().clone();
            let body = first.bytes().await?.to_vec();
            return Ok(Err(Paid { status, headers, body, payment: None, settlement: None, signed_in: None }));
        }
        let v2_header = first.headers().get(PAYMENT_REQUIRED).and_then(|h| h.to_str().ok()).map(str::to_owned);
        let body = first.bytes().await?;
        read_challenge(v2_header.as_deref(), &body).map(Ok)
    }

    /// Sends the request again with the proof, retrying while the seller answers "pending":
    /// the seller's last answer (served or not) and its decoded settlement header.
    /// `resend`: the paid request may be sent again when its answer is lost (the connection
    /// failed after it was sent), as often as a pending one.
    async fn send_paid(
        &self,
        request: &Request,
        (header_name, header_value): (&str, &str),
        resend: bool,
    ) -> Result<(u16, reqwest::header::HeaderMap, Vec<u8>, Option<SettleResponse>), PayError> {
        let mut retries = 0;
        loop {
            let answer = match request.send_with(&self.http, Some((header_name, header_value))).send().await {
                Ok(answer) => answer,
                Err(e) if resend && retries < self.max_pending_retries && !e.is_builder() => {
                    retries += 1;
                    tokio::time::sleep(pending_wait(1)).await;
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            let status = answer.status().as_u16();
            // Pending (503), or the seller's facilitator did not answer in time (504: the payment
            // may yet settle): asked again with the same proof, never paid again. A 504 only
            // when sending again cannot run the request twice.
            let again = status == 503 || (status == 504 && resend);
            if again && retries < self.max_pending_retries {
                retries += 1;
                let wait = answer
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(1);
                tokio::time::sleep(pending_wait(wait)).await;
                continue;
            }
            if again {
                return Err(PayError::StillPending(retries));
            }
            let settlement = [X_PAYMENT_RESPONSE, PAYMENT_RESPONSE]
                .iter()
                .find_map(|name| answer.headers().get(*name))
                .and_then(|h| h.to_str().ok())
                .and_then(|h| tollgate_protocol::x402::header::decode::<SettleResponse>(h).ok());
            let headers = answer.headers().clone();
            let body = answer.bytes().await?.to_vec();
            return Ok((status, headers, body, settlement));
        }
    }

    /// How often a pending payment is retried with the same proof ([`Self::with_pending_retries`]).
    #[must_use]
    pub const fn pending_retries(&self) -> u32 {
        self.max_pending_retries
    }

    /// The decimals of `requirement`'s asset when one of this buyer's wallets can pay it.
    async fn payable(&self, requirement: &PaymentRequirements) -> Result<Option<u8>, PayError> {
        match self.wallet(requirement.network.family()) {
            Some(wallet) => wallet.decimals(requirement).await,
            None => Ok(None),
        }
    }

    /// The first offer, in the seller's order, that this buyer can pay within the cap and its
    /// budget, reserved in the budget: an offer over the budget gives way to the next (another
    /// asset may have room left).
    async fn reserve(
        &self,
        challenge: &PaymentRequired,
        url: &str,
    ) -> Result<(Choice, Option<budget::Reservation>), PayError> {
        let Some(budget) = &self.budget else { return Ok((self.choose(challenge).await?, None)) };
        let mut over_budget = None;
        for choice in self.choices(challenge, false).await? {
            match budget.reserve(url, &choice.requirement, choice.decimals).await {
                Ok(reservation) => return Ok((choice, Some(reservation))),
                Err(e @ PayError::OverBudget { .. }) => {
                    over_budget.get_or_insert(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(over_budget.unwrap_or_else(|| PayError::NoOption("no offer fits".into())))
    }

    /// The first offer, in the seller's order, that this buyer can pay within the cap.
    async fn choose(&self, challenge: &PaymentRequired) -> Result<Choice, PayError> {
        let mut choices = self.choices(challenge, true).await?;
        Ok(choices.remove(0))
    }

    /// Every offer, in the seller's order, that this buyer can pay within the cap (at least one);
    /// with `first`, only the first (the chain is not read for the others).
    async fn choices(&self, challenge: &PaymentRequired, first: bool) -> Result<Vec<Choice>, PayError> {
        let offers = challenge.requirements();
        let mut over_cap = None;
        let mut uncapped = None;
        let mut choices = Vec::new();
        for (requirement, resource) in &offers {
            // An offer in another asset than the cap's is not taken: 1 SOL is no cap on ETH.
            if let Some(cap) = &self.cap
                && !self.cap_counts(cap, requirement).await
            {
                continue;
            }
            let Some(decimals) = self.payable(requirement).await? else { continue };
            if let Some(cap) = &self.cap
                && !cap.allows(requirement.amount, decimals)
            {
                over_cap.get_or_insert_with(|| PayError::OverCap {
                    price: priced(&DecimalAmount::from_atomic(requirement.amount, decimals), requirement),
                    cap: cap.to_string(),
                });
                continue;
            }
            // Nothing limits what it takes: not paid unless the buyer said so.
            if self.cap.is_none() && !self.uncapped && !self.budget.as_ref().is_some_and(|b| b.counts(requirement)) {
                uncapped.get_or_insert_with(|| {
                    let whole = DecimalAmount::from_atomic(requirement.amount, decimals);
                    let suggested = match requirement.asset {
                        Asset::Native => format!("{whole}{}", requirement.network.family().native_symbol()),
                        Asset::Token(token) => format!("{whole}@{token}"),
                    };
                    PayError::Uncapped {
                        price: priced(&whole, requirement),
                        network: requirement.network.to_string(),
                        pay_to: requirement.pay_to.to_string(),
                        suggested,
                    }
                });
                continue;
            }
            choices.push(Choice { requirement: requirement.clone(), resource: resource.clone(), decimals });
            if first {
                break;
            }
        }
        if !choices.is_empty() {
            return Ok(choices);
        }
        Err(over_cap.or(uncapped).unwrap_or_else(|| {
            let offered: Vec<String> = offers.iter().map(|(r, _)| describe(r)).collect();
            match &self.cap {
                Some(cap) if cap.asset != CapAsset::Any => {
                    PayError::NoOption(format!("{}; none in the cap's asset ({cap})", offered.join(", ")))
                }
                _ => PayError::NoOption(offered.join(", ")),
            }
        }))
    }

    /// Whether `cap` is counted in `requirement`'s asset; a cap by symbol asks the wallet what
    /// the asset's chain calls it.
    async fn cap_counts(&self, cap: &Cap, requirement: &PaymentRequirements) -> bool {
        match (&cap.asset, self.wallet(requirement.network.family())) {
            (CapAsset::Symbol(symbol), Some(wallet)) => {
                wallet.symbol(requirement).await.is_some_and(|named| named.eq_ignore_ascii_case(symbol))
            }
            (CapAsset::Symbol(_), None) => false,
            _ => cap.counts(requirement),
        }
    }

    /// Builds and signs the proof; the header to send it in, and what it pays.
    async fn pay(
        &self,
        challenge: &PaymentRequired,
        choice: &Choice,
    ) -> Result<(&'static str, String, PaymentPayload, PaymentMade), PayError> {
        let requirement = &choice.requirement;
        let missing = || PayError::NoOption(describe(requirement));
        let declared = match challenge {
            PaymentRequired::V1(_) => serde_json::Map::new(),
            PaymentRequired::V2(c) => c.extensions.clone(),
        };
        let proof =
            self.wallet(requirement.network.family()).ok_or_else(missing)?.prove(requirement, &declared).await?;
        let Proof { payload: proof, transaction, mut extensions, approval } = proof;
        // A seller that takes the `payment-identifier` extension gets an id with the payment:
        // a retry of the paid request (its answer lost) is answered as the first was, and the
        // seller's handler does not run twice.
        payment_identifier::append(&declared, &mut extensions, &new_payment_id()?);
        let (name, header, payload) = self.envelope(challenge, choice, proof, extensions)?;
        let made = PaymentMade {
            amount: requirement.amount,
            whole: DecimalAmount::from_atomic(requirement.amount, choice.decimals),
            asset: requirement.asset,
            network: requirement.network.clone(),
            transaction,
            authorized: (requirement.scheme == SCHEME_UPTO).then_some(requirement.amount),
            approval,
            channel: None,
        };
        Ok((name, header, payload, made))
    }

    /// `proof` for `choice` in the payment payload of `challenge`'s version: the header that
    /// carries it, its value, and the payload.
    fn envelope(
        &self,
        challenge: &PaymentRequired,
        choice: &Choice,
        proof: serde_json::Value,
        extensions: serde_json::Map<String, serde_json::Value>,
    ) -> Result<(&'static str, String, PaymentPayload), PayError> {
        let requirement = &choice.requirement;
        let (name, payload) = match challenge {
            PaymentRequired::V1(_) => (
                X_PAYMENT,
                PaymentPayload::V1(PaymentPayloadV1 {
                    x402_version: V1,
                    scheme: requirement.scheme.clone(),
                    network: requirement.network.clone(),
                    payload: proof,
                }),
            ),
            PaymentRequired::V2(_) => (
                PAYMENT_SIGNATURE,
                PaymentPayload::V2(Box::new(PaymentPayloadV2 {
                    x402_version: V2,
                    resource: Some(choice.resource.clone()),
                    accepted: requirement.clone(),
                    payload: proof,
                    extensions,
                })),
            ),
        };
        let header = payload.to_header().map_err(|e| PayError::Build(e.to_string()))?;
        Ok((name, header, payload))
    }
}

/// A seller's refusal of a paid request (`status`, `body`): its `error`, or the body.
fn refusal(status: u16, body: &[u8]) -> PayError {
    let reason = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["error"].as_str().map(str::to_owned))
        .unwrap_or_else(|| String::from_utf8_lossy(body).into_owned());
    PayError::Refused { status, reason }
}

/// A new `payment-identifier` id: `tg_` and 32 random hexadecimal digits.
fn new_payment_id() -> Result<String, PayError> {
    use rand::TryRngCore as _;
    let mut bytes = [0u8; 16];
    rand::rngs::OsRng.try_fill_bytes(&mut bytes).map_err(|e| PayError::Build(format!("no randomness: {e}")))?;
    Ok(format!("tg_{}", bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()))
}

/// One offer, for people: "exact-native of 1000 atomic SOL on solana:…".
fn describe(r: &PaymentRequirements) -> String {
    let asset = match r.asset {
        Asset::Native => r.network.family().native_symbol().to_owned(),
        Asset::Token(t) => t.to_string(),
    };
    format!("{} of {} atomic {asset} on {}", r.scheme, r.amount, r.network)
}

/// A number in `0..spread` that the next `spread` calls in this process do not repeat: a counter
/// from a starting point drawn from the clock at first use (so two processes rarely agree).
pub(crate) fn unique_below(spread: u32) -> u32 {
    static START: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let start = *START.get_or_init(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos().into())
    });
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    u32::try_from(start.wrapping_add(n) % u64::from(spread.max(1))).unwrap_or(0)
}

/// The seller's payment request (see [`PaymentRequired::from_answer`]).
fn read_challenge(v2_header: Option<&str>, body: &[u8]) -> Result<PaymentRequired, PayError> {
    PaymentRequired::from_answer(v2_header, body).map_err(PayError::Challenge)
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
    fn a_cap_names_its_asset_and_takes_no_offer_in_another() {
        let offer = |network: &str, asset: &str| -> PaymentRequirements {
            serde_json::from_value(serde_json::json!({"scheme": "exact-native", "network": network, "amount": "1",
                "asset": asset, "payTo": "0x1111111111111111111111111111111111111111", "maxTimeoutSeconds": 60}))
            .unwrap()
        };
        let (eth, sol) = (offer("eip155:8453", "native"), offer("solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1", "native"));
        let token = "0x2222222222222222222222222222222222222222";
        let tusd = offer("eip155:8453", token);
        let in_sol = Cap::parse("0.01SOL").unwrap();
        assert_eq!((in_sol.to_string(), in_sol.counts(&sol), in_sol.counts(&eth)), ("0.01 SOL".into(), true, false));
        let in_eth = Cap::parse(" 0.001 eth ").unwrap();
        assert!(in_eth.counts(&eth) && !in_eth.counts(&sol) && !in_eth.counts(&tusd));
        let in_token = Cap::parse(&format!("1.5@{token}")).unwrap();
        assert!(in_token.counts(&tusd) && !in_token.counts(&eth));
        assert!(Cap::whole("1").unwrap().counts(&eth), "an unnamed cap counts any asset");
        // A token by its symbol: checked against what the chain says (the wallet), never here.
        let in_usdc = Cap::parse("0.05usdc").unwrap();
        assert_eq!(in_usdc.asset(), &CapAsset::Symbol("USDC".into()));
        assert_eq!(in_usdc.to_string(), "0.05 USDC");
        assert!(!in_usdc.counts(&tusd) && !in_usdc.counts(&eth));
        for bad in ["1", "0.01", "1B-TC", "1TOOLONGSYMBOL", "x@0x12", "1@not-an-address", "SOL", "xUSDC"] {
            assert!(matches!(Cap::parse(bad), Err(PayError::Cap(_))), "{bad}");
        }
        assert!(matches!(Limit::parse("1USDC/day", false), Err(PayError::Cap(_))), "budgets name tokens by address");
    }

    #[test]
    fn unique_numbers_do_not_repeat_within_their_spread() {
        let seen: std::collections::HashSet<u32> = (0..1_000).map(|_| unique_below(1_000)).collect();
        assert_eq!(seen.len(), 1_000);
        assert!(seen.iter().all(|n| *n < 1_000));
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
