//! Paying from payment channels (x402 `batch-settlement`), whatever the chain: the buyer
//! deposits once into a channel of the seller's terms and then signs, per request, a voucher
//! for the running total it agrees to pay (what the seller has charged so far, plus this price).
//! The seller checks a signature and serves; it claims and sweeps later, in one transaction for
//! thousands of requests.
//!
//! The buyer keeps its count of each channel ([`ChannelAccount`]: deposited, charged, signed) in
//! its budget file when it has one (so a restart goes on where it stopped), else in memory, and
//! reads the chain when it has no count or its count may be stale (an answer lost). Requests of
//! one buyer on one channel take turns: each voucher follows the last.
//!
//! The client rules (the spec's, and ours where it is silent), checked on every answer:
//! - a served request may charge at most its price, and the seller's running total must be the
//!   buyer's plus that charge: otherwise the buyer **stops signing** on that channel
//!   ([`ChannelAccount::halted`]) until the channel is refunded or withdrawn;
//! - a seller that counts differently answers `402` with its count (`channelState`) and the last
//!   voucher it holds (`voucherState`): the buyer takes that count only when the voucher is its
//!   own signature, for at least that count, and the count is not below what the chain says was
//!   claimed; without a voucher, its own count or the chain's, the larger. Then it pays again,
//!   once; the refused voucher stays counted in the budget (it left the buyer);
//! - a corrective 402 that shows the voucher just sent (never signed before) as already charged
//!   — a seller that keeps vouchers and serves nothing — stops signing on that channel;
//! - what the buyer keeps locked in channels of one asset, all told, is at most the deposit
//!   limit: [`Buyer::with_deposit_cap`], else ten times the per-request cap, and never more than
//!   the smallest budget limit in that asset.
//!
//! Funds left in a channel come back by a cooperative refund through the seller
//! ([`Buyer::refund`]), or without it by a timed withdrawal ([`Buyer::start_withdrawal`], then
//! [`Buyer::finish_withdrawal`] once the channel's delay has passed).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use rusqlite::{OptionalExtension as _, params};
use serde_json::Value;
use tokio::sync::OwnedMutexGuard;
use tollgate_protocol::x402::batch::{
    self, ChannelConfig, Deposit, DepositPayload, RefundPayload, VoucherPayload, reason,
};
use tollgate_protocol::x402::header::{PAYMENT_REQUIRED, PAYMENT_RESPONSE};
use tollgate_protocol::x402::{PaymentPayload, PaymentRequired, PaymentRequirements, SettleResponse};
use tollgate_protocol::{AtomicAmount, Network};

use crate::budget::Budget;
use crate::{Authorization, Buyer, Choice, PayError, PaymentMade, read_challenge};
use crate::{Channel, ChannelWallet};

/// A deposit, when the seller announces no `minDeposit`, covers this many requests.
const DEPOSIT_REQUESTS: u128 = 5;
/// Without a deposit cap, a deposit locks at most this many times the per-request cap.
const DEPOSIT_CAP_MULTIPLE: u128 = 10;

/// Why a buyer stops signing on a channel it started withdrawing from.
const WITHDRAWING: &str = "a withdrawal was started";

/// What a buyer knows of one of its channels.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ChannelAccount {
    /// The channel's id.
    pub id: String,
    /// Its network.
    pub network: Network,
    /// Its configuration (payer, receiver, token, authorizers, withdrawal delay, salt).
    pub config: ChannelConfig,
    /// The URL it last paid (where a cooperative refund is asked).
    pub url: String,
    /// Deposited, less what came back, as the buyer last knew it.
    pub balance: AtomicAmount,
    /// What the seller has charged in all, as its answers said (checked).
    pub charged: AtomicAmount,
    /// The most the buyer has signed for (the seller may claim up to it).
    pub signed: AtomicAmount,
    /// Why the buyer stopped signing vouchers on it, when it did.
    pub halted: Option<String>,
    /// Its count may be behind the seller's or the chain's (an answer was lost): the chain is
    /// read before it pays again.
    pub stale: bool,
}

impl ChannelAccount {
    /// Left in the channel for later requests (or a refund), as the buyer knows it.
    #[must_use]
    pub fn unspent(&self) -> AtomicAmount {
        AtomicAmount(self.balance.get().saturating_sub(self.charged.get()))
    }

    fn channel(&self) -> Channel {
        Channel::new(self.config.clone(), self.id.clone())
    }
}

/// Where a buyer keeps its channels: its budget file, or memory; and whose turn it is on each.
#[derive(Default, Clone)]
pub(crate) struct ChannelBook {
    memory: Arc<Mutex<HashMap<String, ChannelAccount>>>,
    turns: Arc<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>>,
}

impl std::fmt::Debug for ChannelBook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelBook").finish_non_exhaustive()
    }
}

fn db_error(e: &rusqlite::Error) -> PayError {
    PayError::Budget(format!("the budget file's channels: {e}"))
}

fn parse_amount(text: &str) -> Result<AtomicAmount, PayError> {
    text.parse().map(AtomicAmount).map_err(|_| PayError::Budget(format!("the budget file holds {text:?}")))
}

fn row_to_account(row: &rusqlite::Row<'_>) -> rusqlite::Result<[Option<String>; 9]> {
    Ok([
        row.get(0)?,
        row.get(1)?,
        row.get(2)?,
        row.get(3)?,
        row.get(4)?,
        row.get(5)?,
        row.get(6)?,
        row.get(7)?,
        Some(row.get::<_, i64>(8)?.to_string()),
    ])
}

fn account_of(fields: [Option<String>; 9]) -> Result<ChannelAccount, PayError> {
    let [id, network, config, url, balance, charged, signed, halted, stale] = fields;
    let text = |f: Option<String>| f.unwrap_or_default();
    Ok(ChannelAccount {
        id: text(id),
        network: text(network).parse().map_err(|e| PayError::Budget(format!("the budget file's network: {e}")))?,
        config: serde_json::from_str(&text(config))
            .map_err(|e| PayError::Budget(format!("the budget file's channel: {e}")))?,
        url: text(url),
        balance: parse_amount(&text(balance))?,
        charged: parse_amount(&text(charged))?,
        signed: parse_amount(&text(signed))?,
        halted,
        stale: text(stale) != "0",
    })
}

const COLUMNS: &str = "id, network, config, url, balance, charged, signed, halted, stale";

impl ChannelBook {
    async fn get(&self, budget: Option<&Budget>, id: &str) -> Result<Option<ChannelAccount>, PayError> {
        let Some(budget) = budget else {
            return Ok(self.memory.lock().unwrap_or_else(PoisonError::into_inner).get(id).cloned());
        };
        let id = id.to_owned();
        let fields = budget
            .with_db(move |db| {
                db.query_row(&format!("SELECT {COLUMNS} FROM channels WHERE id = ?1"), [id], row_to_account)
                    .optional()
                    .map_err(|e| db_error(&e))
            })
            .await?;
        fields.map(account_of).transpose()
    }

    async fn put(&self, budget: Option<&Budget>, account: &ChannelAccount) -> Result<(), PayError> {
        let Some(budget) = budget else {
            self.memory.lock().unwrap_or_else(PoisonError::into_inner).insert(account.id.clone(), account.clone());
            return Ok(());
        };
        let a = account.clone();
        let config = serde_json::to_string(&a.config).map_err(|e| PayError::Budget(e.to_string()))?;
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        budget
            .with_db(move |db| {
                db.execute(
                    "INSERT INTO channels (id, network, config, url, balance, charged, signed, halted, stale, updated_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
                     ON CONFLICT (id) DO UPDATE SET url = ?4, balance = ?5, charged = ?6, signed = ?7, halted = ?8,
                       stale = ?9, updated_at = ?10",
                    params![
                        a.id,
                        a.network.to_string(),
                        config,
                        a.url,
                        a.balance.get().to_string(),
                        a.charged.get().to_string(),
                        a.signed.get().to_string(),
                        a.halted,
                        i64::from(a.stale),
                        i64::try_from(now).unwrap_or(i64::MAX),
                    ],
                )
                .map(drop)
                .map_err(|e| db_error(&e))
            })
            .await
    }

    async fn all(&self, budget: Option<&Budget>) -> Result<Vec<ChannelAccount>, PayError> {
        let Some(budget) = budget else {
            let mut all: Vec<ChannelAccount> =
                self.memory.lock().unwrap_or_else(PoisonError::into_inner).values().cloned().collect();
            all.sort_by(|a, b| a.id.cmp(&b.id));
            return Ok(all);
        };
        let rows = budget
            .with_db(|db| {
                let mut query = db
                    .prepare(&format!("SELECT {COLUMNS} FROM channels ORDER BY updated_at DESC"))
                    .map_err(|e| db_error(&e))?;
                let rows = query.query_map([], row_to_account).map_err(|e| db_error(&e))?;
                rows.collect::<Result<Vec<_>, _>>().map_err(|e| db_error(&e))
            })
            .await?;
        rows.into_iter().map(account_of).collect()
    }

    /// Waits for the channel's turn: one request of this buyer at a time on one channel.
    async fn turn(&self, id: &str) -> OwnedMutexGuard<()> {
        let lock = self.turns.lock().unwrap_or_else(PoisonError::into_inner).entry(id.to_owned()).or_default().clone();
        lock.lock_owned().await
    }
}

/// A channel payment sent and not yet answered: what the buyer knew, what it signed.
pub(crate) struct ChannelUse {
    channel: Channel,
    account: ChannelAccount,
    price: AtomicAmount,
    deposit: Option<AtomicAmount>,
    /// The voucher this payment signed (the running total it agreed to).
    sent: AtomicAmount,
    /// The most the buyer had signed before it.
    signed_before: AtomicAmount,
    _turn: OwnedMutexGuard<()>,
}

impl std::fmt::Debug for ChannelUse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelUse").field("channel", &self.channel.id).field("price", &self.price).finish()
    }
}

/// A cooperative refund the seller made ([`Buyer::refund`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Refunded {
    /// The channel.
    pub channel: String,
    /// Returned to the buyer, atomic units.
    pub amount: AtomicAmount,
    /// The refund's transaction.
    pub transaction: Option<String>,
}

/// The first number in `text` (a JSON string of digits).
fn amount_in(value: Option<&Value>) -> Option<AtomicAmount> {
    let value = value?;
    value.as_str().and_then(|t| t.parse().ok()).or_else(|| value.as_u64().map(u128::from)).map(AtomicAmount)
}

/// How much to deposit: enough for this request, and the seller's `minDeposit` (or
/// [`DEPOSIT_REQUESTS`] requests) when that fits `limit`.
fn deposit_size(
    needed: u128,
    price: u128,
    requirement: &PaymentRequirements,
    limit: Option<u128>,
) -> Result<u128, u128> {
    let announced = amount_in(requirement.extra.as_ref().and_then(|e| e.get("minDeposit")))
        .map(AtomicAmount::get)
        .filter(|m| *m >= price);
    let target = announced.unwrap_or_else(|| price.saturating_mul(DEPOSIT_REQUESTS));
    let deposit = needed.max(target);
    match limit {
        Some(limit) if needed > limit => Err(limit),
        Some(limit) => Ok(deposit.min(limit)),
        None => Ok(deposit),
    }
}

impl Buyer {
    /// Opens and pays from payment channels within `cap` per deposit (whole units of the
    /// named asset): without it, a deposit locks at most ten times the per-request cap.
    #[must_use]
    pub fn with_deposit_cap(mut self, cap: crate::Cap) -> Self {
        self.deposit_cap = Some(cap);
        self
    }

    /// The channels this buyer knows (its budget file's, or this process's), most recent first.
    ///
    /// # Errors
    /// [`PayError::Budget`] when the budget file cannot be read.
    pub async fn channels(&self) -> Result<Vec<ChannelAccount>, PayError> {
        self.book.all(self.budget.as_ref()).await
    }

    /// The wallet paying on `network`'s chain family, and its channels.
    fn channel_wallet(&self, network: &Network) -> Result<&dyn ChannelWallet, PayError> {
        self.wallet(network.family()).and_then(|w| w.channels()).ok_or_else(|| {
            PayError::NoOption(format!("batch-settlement on {network} (no wallet with payment channels)"))
        })
    }

    /// What this buyer knows of `channel`, the chain read when it knows nothing or its count may
    /// be behind.
    async fn account(
        &self,
        wallet: &dyn ChannelWallet,
        channel: &Channel,
        network: &Network,
        url: &str,
    ) -> Result<ChannelAccount, PayError> {
        let known = self.book.get(self.budget.as_ref(), &channel.id).await?;
        if let Some(known) = known.as_ref().filter(|a| !a.stale) {
            return Ok(known.clone());
        }
        let chain = wallet.on_chain(channel).await?;
        let mut account = known.unwrap_or_else(|| ChannelAccount {
            id: channel.id.clone(),
            network: network.clone(),
            config: channel.config.clone(),
            url: url.to_owned(),
            balance: AtomicAmount(0),
            charged: AtomicAmount(0),
            signed: AtomicAmount(0),
            halted: None,
            stale: false,
        });
        account.balance = chain.balance;
        account.charged = account.charged.max(chain.claimed);
        account.signed = account.signed.max(account.charged);
        account.stale = false;
        Ok(account)
    }

    /// What this buyer keeps unspent in its other channels of `requirement`'s network and token.
    async fn locked_elsewhere(&self, channel: &str, requirement: &PaymentRequirements) -> Result<u128, PayError> {
        let tollgate_protocol::x402::Asset::Token(token) = requirement.asset else { return Ok(0) };
        let all = self.book.all(self.budget.as_ref()).await?;
        Ok(all
            .iter()
            .filter(|a| a.id != channel && a.network == requirement.network && a.config.token == token)
            .map(|a| a.unspent().get())
            .fold(0u128, u128::saturating_add))
    }

    /// The most one deposit for `choice` may lock, when anything limits it.
    fn deposit_limit(&self, choice: &Choice) -> Option<u128> {
        let capped = match (&self.deposit_cap, &self.cap) {
            (Some(cap), _) => cap.atomic(choice.decimals).map(AtomicAmount::get),
            (None, Some(cap)) => cap.atomic(choice.decimals).map(|c| c.get().saturating_mul(DEPOSIT_CAP_MULTIPLE)),
            (None, None) => None,
        };
        let budgeted = self.budget.as_ref().and_then(|b| b.smallest_limit(&choice.requirement, choice.decimals));
        [capped, budgeted.map(AtomicAmount::get)].into_iter().flatten().min()
    }

    /// Builds the channel payment for `choice` (met at `url`): a voucher for what was charged
    /// plus the price, with a deposit first when the channel holds too little. The signed total
    /// is recorded before the proof leaves.
    pub(crate) async fn pay_from_channel(
        &self,
        challenge: &PaymentRequired,
        choice: &Choice,
        url: &str,
    ) -> Result<(&'static str, String, PaymentPayload, PaymentMade, ChannelUse), PayError> {
        let requirement = &choice.requirement;
        let wallet = self.channel_wallet(&requirement.network)?;
        let channel = wallet.channel(requirement).await?;
        let turn = self.book.turn(&channel.id).await;
        let mut account = self.account(wallet, &channel, &requirement.network, url).await?;
        if let Some(why) = &account.halted {
            return Err(PayError::Channel(format!(
                "it stopped signing on channel {} ({why}); get the rest back with tollgate-pay channels refund",
                channel.id
            )));
        }
        let price = requirement.amount;
        let next = account
            .charged
            .get()
            .checked_add(price.get())
            .ok_or_else(|| PayError::Channel("the channel's total would overflow".into()))?;
        let deposit = if next > account.balance.get() {
            let needed = next - account.balance.get();
            // The limit is on what this buyer keeps locked in channels of this asset, all told: a
            // seller naming a new channel at every request opens no more than it allows.
            let locked = self.locked_elsewhere(&channel.id, requirement).await?;
            let limit = self.deposit_limit(choice).map(|l| l.saturating_sub(locked));
            let amount =
                deposit_size(needed, price.get(), requirement, limit).map_err(|limit| PayError::DepositOverLimit {
                    needed: crate::priced(
                        &tollgate_protocol::DecimalAmount::from_atomic(AtomicAmount(needed), choice.decimals),
                        requirement,
                    ),
                    limit: crate::priced(
                        &tollgate_protocol::DecimalAmount::from_atomic(AtomicAmount(limit), choice.decimals),
                        requirement,
                    ),
                })?;
            Some(AtomicAmount(amount))
        } else {
            None
        };
        let voucher = wallet.voucher(&channel, AtomicAmount(next)).await?;
        let payload = match deposit {
            Some(amount) => serde_json::to_value(DepositPayload {
                kind: "deposit".into(),
                channel_config: channel.config.clone(),
                voucher,
                deposit: Deposit { amount, authorization: wallet.deposit(requirement, &channel, amount).await? },
            }),
            None => serde_json::to_value(VoucherPayload {
                kind: "voucher".into(),
                channel_config: channel.config.clone(),
                voucher,
            }),
        }
        .map_err(|e| PayError::Build(e.to_string()))?;
        let signed_before = account.signed;
        account.signed = account.signed.max(AtomicAmount(next));
        account.url = url.to_owned();
        self.book.put(self.budget.as_ref(), &account).await?;
        let (name, header, payload) = self.envelope(challenge, choice, payload, serde_json::Map::new())?;
        let made = PaymentMade {
            amount: price,
            whole: tollgate_protocol::DecimalAmount::from_atomic(price, choice.decimals),
            asset: requirement.asset,
            network: requirement.network.clone(),
            transaction: None,
            authorized: None,
            approval: None,
            channel: Some(channel.id.clone()),
        };
        let used =
            ChannelUse { channel, account, price, deposit, sent: AtomicAmount(next), signed_before, _turn: turn };
        Ok((name, header, payload, made, used))
    }

    /// The seller served a channel payment and said `settlement`: what it charged, checked by
    /// the client rules (a seller whose count breaks them is not signed for again).
    pub(crate) async fn channel_settled(&self, used: ChannelUse, settlement: Option<&SettleResponse>) -> AtomicAmount {
        let ChannelUse { mut account, price, deposit, .. } = used;
        let extra = settlement.and_then(|s| s.extra.as_ref());
        // Without the seller's word, what the voucher lets it take.
        let charged = amount_in(extra.and_then(|e| e.get("chargedAmount")))
            .or_else(|| settlement.and_then(|s| s.amount))
            .unwrap_or(price);
        let total = account.charged.get().saturating_add(charged.get());
        let told = amount_in(extra.and_then(|e| e.get("channelState")).and_then(|s| s.get("chargedCumulativeAmount")));
        if charged > price {
            account.halted = Some(format!("charged {charged} for a request priced {price}"));
        } else if let Some(told) = told.filter(|t| t.get() != total) {
            account.halted = Some(format!("the seller counts {told} charged in all where the buyer counts {total}"));
        }
        if let Some(why) = &account.halted {
            tracing::warn!(channel = %account.id, %why, "stopped signing on a payment channel");
        }
        account.charged = AtomicAmount(total.min(account.signed.get()));
        if let Some(deposit) = deposit {
            account.balance = AtomicAmount(account.balance.get().saturating_add(deposit.get()));
        }
        if let Err(e) = self.book.put(self.budget.as_ref(), &account).await {
            tracing::warn!(error = %e, "a payment channel's count could not be recorded");
        }
        if account.halted.is_some() { price } else { charged }
    }

    /// A channel payment was sent and not answered as served: the count may be behind (the
    /// seller may have charged it); the chain is read before the next.
    pub(crate) async fn channel_unsettled(&self, used: ChannelUse) {
        let mut account = used.account;
        account.stale = true;
        if let Err(e) = self.book.put(self.budget.as_ref(), &account).await {
            tracing::warn!(error = %e, "a payment channel's count could not be recorded");
        }
    }

    /// The seller answered `authorization` with a new payment request (`challenge`, a `402`):
    /// when it paid from a channel the seller counts differently, the buyer's count is set by
    /// the client rules and `true` says to authorize again (once). Otherwise the payment is
    /// ended as [`Self::unsettled`] and `false` returned.
    pub async fn refused(&self, authorization: Authorization, challenge: &PaymentRequired) -> bool {
        if authorization.channel.is_none() {
            self.unsettled(authorization).await;
            return false;
        }
        // The voucher left the buyer: its reservation stays counted in the budget (a seller that
        // said no may still hold it), as any proof that was sent and not settled.
        let Authorization { channel: Some(used), .. } = authorization else { return false };
        let resynced = match self.channel_wallet(&used.account.network) {
            Ok(wallet) => self.resync(wallet, &used, challenge).await,
            Err(_) => None,
        };
        let again = resynced.as_ref().is_some_and(|a| a.halted.is_none());
        let account = resynced.unwrap_or_else(|| ChannelAccount { stale: true, ..used.account.clone() });
        if let Err(e) = self.book.put(self.budget.as_ref(), &account).await {
            tracing::warn!(error = %e, "a payment channel's count could not be recorded");
            return false;
        }
        again
    }

    /// The count a corrective `402` gives, when the client rules take it.
    async fn resync(
        &self,
        wallet: &dyn ChannelWallet,
        used: &ChannelUse,
        challenge: &PaymentRequired,
    ) -> Option<ChannelAccount> {
        let PaymentRequired::V2(c) = challenge else { return None };
        let error = c.error.as_deref().unwrap_or_default();
        let corrective = [reason::CUMULATIVE_MISMATCH, reason::BELOW_CLAIMED, reason::EXCEEDS_BALANCE]
            .iter()
            .any(|code| error.starts_with(code));
        if !corrective {
            return None;
        }
        let offer = c.accepts.iter().find(|r| r.scheme == batch::SCHEME && r.network == used.account.network)?;
        let extra = offer.extra.as_ref();
        let state = extra.and_then(|e| e.get("channelState"));
        let told = amount_in(state.and_then(|s| s.get("chargedCumulativeAmount")));
        let voucher = extra.and_then(|e| e.get("voucherState"));
        let signed = amount_in(voucher.and_then(|v| v.get("signedMaxClaimable")));
        let signature = voucher.and_then(|v| v.get("signature")).and_then(Value::as_str);
        let chain = wallet.on_chain(&used.channel).await.ok()?;
        let mut account = used.account.clone();
        account.balance = chain.balance;
        account.stale = false;
        account.charged = match (told, signed, signature) {
            (Some(told), Some(signed), Some(signature)) => {
                // The voucher just sent, never signed before this request, shown back as already
                // charged while the request is refused: a seller that keeps vouchers and serves
                // nothing. The buyer stops signing on the channel. (A voucher signed before this
                // request — its answer lost — is the seller's to show.)
                if signed == used.sent && used.signed_before < used.sent {
                    let mut halted = used.account.clone();
                    halted.halted =
                        Some(format!("the seller refused the voucher for {signed} and showed it back as charged"));
                    halted.stale = true;
                    tracing::warn!(channel = %halted.id, "a seller kept a voucher it refused; stopped signing");
                    return Some(halted);
                }
                let ours =
                    told <= signed && told >= chain.claimed && wallet.signed(&used.channel, signed, signature).await;
                if !ours {
                    tracing::warn!(channel = %account.id, "a seller's count is not backed by the buyer's voucher");
                    return None;
                }
                account.signed = account.signed.max(signed);
                told
            }
            // No voucher shown (the channel holds less than the buyer thought): the buyer's own
            // count, or what the chain says was claimed when that is more.
            _ => account.charged.max(chain.claimed),
        };
        Some(account)
    }

    /// Asks the seller at `url` to return what is left in this buyer's channel with it (all
    /// of it, or `amount`): the charges are claimed and the rest sent back in one transaction.
    ///
    /// # Errors
    /// [`PayError`] when `url` sells nothing from a channel this buyer can pay, nothing is left,
    /// or the seller refuses.
    pub async fn refund(&self, url: &str, amount: Option<AtomicAmount>) -> Result<Refunded, PayError> {
        let request = crate::Request::get(url);
        let challenge = match self.challenge(&request).await? {
            Ok(challenge) => challenge,
            Err(answer) => {
                return Err(PayError::Challenge(format!("{url} answered {} without a payment request", answer.status)));
            }
        };
        for _ in 0..2 {
            let PaymentRequired::V2(c) = &challenge else {
                return Err(PayError::Challenge("payment channels are x402 v2 only".into()));
            };
            let mut offered = None;
            for requirement in c.accepts.iter().filter(|r| r.scheme == batch::SCHEME) {
                if let Some(decimals) = self.payable(requirement).await? {
                    offered = Some((requirement.clone(), decimals));
                    break;
                }
            }
            let (requirement, decimals) = offered
                .ok_or_else(|| PayError::NoOption(format!("{url} sells nothing from a channel this buyer pays")))?;
            let wallet = self.channel_wallet(&requirement.network)?;
            let channel = wallet.channel(&requirement).await?;
            let turn = self.book.turn(&channel.id).await;
            let mut account = self.account(wallet, &channel, &requirement.network, url).await?;
            if account.unspent().get() == 0 {
                return Err(PayError::Channel(format!("channel {} holds nothing unspent to refund", channel.id)));
            }
            let voucher = wallet.voucher(&channel, account.charged).await?;
            let payload = serde_json::to_value(RefundPayload {
                kind: "refund".into(),
                channel_config: channel.config.clone(),
                voucher,
                amount,
                refund_nonce: None,
                claims: None,
                refund_authorizer_signature: None,
                claim_authorizer_signature: None,
            })
            .map_err(|e| PayError::Build(e.to_string()))?;
            let choice = Choice { requirement: requirement.clone(), resource: c.resource.clone(), decimals };
            let (name, header, _) = self.envelope(&challenge, &choice, payload, serde_json::Map::new())?;
            let answer = request.send_with(&self.http, Some((name, &header))).send().await?;
            let status = answer.status().as_u16();
            let settlement = answer
                .headers()
                .get(PAYMENT_RESPONSE)
                .and_then(|h| h.to_str().ok())
                .and_then(|h| tollgate_protocol::x402::header::decode::<SettleResponse>(h).ok());
            let required = answer.headers().get(PAYMENT_REQUIRED).and_then(|h| h.to_str().ok()).map(str::to_owned);
            let body = answer.bytes().await?;
            match settlement {
                Some(settled) if settled.success && (200..300).contains(&status) => {
                    let returned = amount
                        .or_else(|| {
                            amount_in(
                                serde_json::from_slice::<Value>(&body).ok().as_ref().and_then(|b| b.get("amount")),
                            )
                        })
                        .unwrap_or_else(|| account.unspent());
                    account.balance = AtomicAmount(account.balance.get().saturating_sub(returned.get()));
                    account.stale = true;
                    self.book.put(self.budget.as_ref(), &account).await?;
                    drop(turn);
                    let transaction = Some(settled.transaction).filter(|t| !t.is_empty());
                    return Ok(Refunded { channel: channel.id, amount: returned, transaction });
                }
                _ if status == 402 => {
                    let again = read_challenge(required.as_deref(), &body)?;
                    let (sent, signed_before) = (account.charged, account.signed);
                    let used = ChannelUse {
                        channel,
                        account,
                        price: AtomicAmount(0),
                        deposit: None,
                        sent,
                        signed_before,
                        _turn: turn,
                    };
                    let Some(synced) = self.resync(wallet, &used, &again).await else {
                        let why = match &again {
                            PaymentRequired::V2(c) => c.error.clone().unwrap_or_default(),
                            PaymentRequired::V1(c) => c.error.clone(),
                        };
                        return Err(PayError::Refused { status, reason: why });
                    };
                    self.book.put(self.budget.as_ref(), &synced).await?;
                }
                _ => {
                    let reason = settlement
                        .and_then(|s| s.error_reason)
                        .unwrap_or_else(|| String::from_utf8_lossy(&body).into_owned());
                    return Err(PayError::Refused { status, reason });
                }
            }
        }
        Err(PayError::Channel("the seller's count changed twice during the refund".into()))
    }

    /// The channel `id` this buyer knows.
    async fn known(&self, id: &str) -> Result<ChannelAccount, PayError> {
        let id = id.trim().to_ascii_lowercase();
        self.book.get(self.budget.as_ref(), &id).await?.ok_or_else(|| {
            PayError::Channel(format!("no channel {id} in this buyer's records (tollgate-pay channels list)"))
        })
    }

    /// Starts a timed withdrawal of all that is unclaimed in channel `id`, without the seller
    /// (a transaction the buyer sends and pays the gas of). The seller may still claim what it
    /// was signed for until the channel's delay passes; [`Self::finish_withdrawal`] then returns
    /// the rest. The buyer stops signing on it.
    ///
    /// # Errors
    /// [`PayError`] when the channel is unknown, holds nothing unclaimed, or the transaction
    /// fails.
    pub async fn start_withdrawal(&self, id: &str) -> Result<(String, AtomicAmount, u64), PayError> {
        let known = self.known(id).await?;
        let wallet = self.channel_wallet(&known.network)?;
        let channel = known.channel();
        let _turn = self.book.turn(&channel.id).await;
        let chain = wallet.on_chain(&channel).await?;
        if let Some((amount, at)) = chain.withdrawal {
            return Err(PayError::Channel(format!(
                "a withdrawal of {amount} is already started; it can finish at {at}"
            )));
        }
        let unclaimed = AtomicAmount(chain.balance.get().saturating_sub(chain.claimed.get()));
        if unclaimed.get() == 0 {
            return Err(PayError::Channel(format!("channel {} holds nothing unclaimed", channel.id)));
        }
        let transaction = wallet.start_withdrawal(&channel, unclaimed).await?;
        let mut account = known;
        account.halted = Some(WITHDRAWING.into());
        account.stale = true;
        self.book.put(self.budget.as_ref(), &account).await?;
        let at = wallet.on_chain(&channel).await?.withdrawal.map_or(0, |(_, at)| at);
        Ok((transaction, unclaimed, at))
    }

    /// Finishes the timed withdrawal of channel `id` once its delay has passed: the
    /// transaction that returned the funds.
    ///
    /// # Errors
    /// [`PayError`] when the channel is unknown, no withdrawal was started, or its delay is not
    /// over.
    pub async fn finish_withdrawal(&self, id: &str) -> Result<String, PayError> {
        let known = self.known(id).await?;
        let wallet = self.channel_wallet(&known.network)?;
        let channel = known.channel();
        let _turn = self.book.turn(&channel.id).await;
        if wallet.on_chain(&channel).await?.withdrawal.is_none() {
            return Err(PayError::Channel(format!("no withdrawal was started on channel {}", channel.id)));
        }
        let transaction = wallet.finish_withdrawal(&channel).await?;
        let mut account = known;
        let chain = wallet.on_chain(&channel).await?;
        account.balance = chain.balance;
        account.charged = account.charged.max(chain.claimed);
        account.stale = true;
        // The channel may be paid from again (a new deposit); a seller's broken rule still stops it.
        if account.halted.as_deref() == Some(WITHDRAWING) {
            account.halted = None;
        }
        self.book.put(self.budget.as_ref(), &account).await?;
        Ok(transaction)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offer(extra: Value) -> PaymentRequirements {
        serde_json::from_value(serde_json::json!({"scheme": "batch-settlement", "network": "eip155:31337",
            "amount": "100", "asset": "0x2222222222222222222222222222222222222222",
            "payTo": "0x1111111111111111111111111111111111111111", "maxTimeoutSeconds": 60, "extra": extra}))
        .unwrap()
    }

    #[test]
    fn a_deposit_covers_the_sellers_minimum_within_the_limit() {
        let announced = offer(serde_json::json!({"minDeposit": "1000"}));
        assert_eq!(deposit_size(100, 100, &announced, None), Ok(1000));
        assert_eq!(deposit_size(100, 100, &announced, Some(500)), Ok(500), "cut to the limit");
        assert_eq!(deposit_size(600, 100, &announced, Some(500)), Err(500), "what is needed is above the limit");
        assert_eq!(deposit_size(1500, 100, &announced, None), Ok(1500), "at least what this request needs");
        let silent = offer(serde_json::json!({}));
        assert_eq!(deposit_size(100, 100, &silent, None), Ok(500), "five requests");
        let below_price = offer(serde_json::json!({"minDeposit": "10"}));
        assert_eq!(deposit_size(100, 100, &below_price, None), Ok(500), "a minimum below the price is ignored");
        let garbage = offer(serde_json::json!({"minDeposit": "-1"}));
        assert_eq!(deposit_size(100, 100, &garbage, None), Ok(500));
    }
}
