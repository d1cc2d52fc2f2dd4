//! The claimer: what channels have charged is claimed on chain (many channels in one
//! `claimWithSignature`, through the facilitator) and then swept to the receiver in one
//! transfer — on the seller's [`ClaimPolicy`]: every period, as soon as a channel's unclaimed
//! charges reach a threshold, as soon as its payer starts a timed withdrawal, and once more when
//! the layer is dropped (a server shutting down waits for it on the layer's `TaskTracker`).
//!
//! A claim is accounting only (sent again, it is a no-op on chain) and the facilitator reads
//! each effect back from the chain, so a claimer killed at any step loses nothing: the next
//! pass claims the same vouchers again.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tollgate_protocol::AtomicAmount;
use tollgate_protocol::x402::PaymentRequirements;
use tollgate_protocol::x402::batch::{ChannelState, ClaimPayload, ClaimRow, ClaimVoucher, MAX_CLAIMS, SettlePayload};

use super::store::{ChannelRecord, ChannelStore};
use crate::facilitator::{BatchCall, Facilitator};

/// When the layer claims what its channels have charged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimPolicy {
    /// Every channel with unclaimed charges is claimed at least this often (default 5 minutes;
    /// never more than a third of a channel's withdrawal delay, so nothing signed is left
    /// unclaimed when a withdrawal completes).
    pub every: Duration,
    /// A channel whose unclaimed charges reach this is claimed at once (default: none).
    pub threshold: Option<AtomicAmount>,
    /// How long a channel's chain state read by the facilitator lets vouchers be checked in
    /// process, without asking again (default 60 s).
    pub state_ttl: Duration,
}

impl ClaimPolicy {
    /// Whether `record` is claimed at once, not at the next period: its unclaimed charges
    /// reached the threshold, or its payer started a withdrawal.
    #[must_use]
    pub fn urgent(&self, record: &ChannelRecord) -> bool {
        record.unclaimed() > 0
            && (record.chain.withdraw_requested_at != 0
                || self.threshold.is_some_and(|t| record.unclaimed() >= t.get()))
    }
}

impl Default for ClaimPolicy {
    fn default() -> Self {
        Self { every: Duration::from_secs(300), threshold: None, state_ttl: Duration::from_secs(60) }
    }
}

/// The least time between two urgent passes (a third of the shortest withdrawal delay is five
/// minutes: a channel whose withdrawal started is claimed long before it can complete).
const URGENT_GAP: Duration = Duration::from_secs(30);

/// The running claimer: nudged after each batch request; stopped (after a last pass) when the
/// handle is dropped with the layer.
#[derive(Debug)]
pub(crate) struct Handle {
    nudge: Arc<tokio::sync::Notify>,
    _stop: tokio::sync::watch::Sender<()>,
}

impl Handle {
    /// Looks at the channels now (claims those over the threshold or withdrawing).
    pub(crate) fn nudge(&self) {
        self.nudge.notify_one();
    }
}

/// Starts the claimer on the layer's task tracker.
pub(crate) fn start(
    (facilitator, tasks): (Arc<dyn Facilitator>, &tokio_util::task::TaskTracker),
    store: Arc<dyn ChannelStore>,
    policy: ClaimPolicy,
) -> Handle {
    let nudge = Arc::new(tokio::sync::Notify::new());
    let (stop, mut stopped) = tokio::sync::watch::channel(());
    let claimer = Claimer { store, facilitator, policy };
    let woken = nudge.clone();
    tasks.spawn(async move {
        let mut every = tokio::time::interval(claimer.policy.every);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        every.tick().await;
        let mut last_urgent: Option<tokio::time::Instant> = None;
        loop {
            let all = tokio::select! {
                _ = every.tick() => true,
                () = woken.notified() => false,
                _ = stopped.changed() => {
                    claimer.pass(true).await;
                    return;
                }
            };
            if !all {
                // Nudges come with requests: urgent passes are spaced (a payer that keeps a
                // withdrawal pending and spends would otherwise cost a claim and a sweep a
                // request); the nudges meanwhile are one.
                if let Some(last) = last_urgent {
                    tokio::time::sleep_until(last + URGENT_GAP).await;
                }
                last_urgent = Some(tokio::time::Instant::now());
            }
            claimer.pass(all).await;
        }
    });
    Handle { nudge, _stop: stop }
}

/// How a claim ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Claimed {
    /// Claimed on chain.
    Yes,
    /// The facilitator refused it (a row it cannot claim).
    Refused,
    /// Not known now (the facilitator unavailable, the transaction pending): the next pass.
    Later,
}

/// What the claimer needs.
struct Claimer {
    store: Arc<dyn ChannelStore>,
    facilitator: Arc<dyn Facilitator>,
    policy: ClaimPolicy,
}

impl Claimer {
    /// Whether `record` is claimed in this pass (`all`: every channel with unclaimed charges);
    /// never while a refund, which claims the charges itself, may be under way.
    fn due(&self, record: &ChannelRecord, all: bool) -> bool {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        record.voucher.is_some()
            && record.unclaimed() > 0
            && !record.refunding(now)
            && (all || self.policy.urgent(record))
    }

    /// One pass: the due channels claimed, in batches per receiver and token, then each swept.
    pub(crate) async fn pass(&self, all: bool) {
        let records = match self.store.all().await {
            Ok(records) => records,
            Err(e) => {
                tracing::warn!(error = %e, "the claimer cannot read the channels");
                return;
            }
        };
        let mut groups: BTreeMap<String, Vec<ChannelRecord>> = BTreeMap::new();
        for record in records.into_iter().filter(|r| self.due(r, all)) {
            let r = &record.requirement;
            groups.entry(format!("{} {} {}", r.network, r.asset, r.pay_to)).or_default().push(record);
        }
        for (_, records) in groups {
            let requirement = records[0].requirement.clone();
            let mut claimed_any = false;
            for chunk in records.chunks(MAX_CLAIMS) {
                claimed_any |= self.claim(&requirement, chunk).await;
            }
            if claimed_any {
                sweep(&*self.facilitator, &requirement).await;
            }
        }
    }

    /// Claims `records`' latest vouchers, for what each has charged: in one `claimWithSignature`;
    /// when the facilitator refuses the batch (one row it cannot claim refuses them all), each
    /// row alone, so that one bad channel never keeps the others unclaimed; a row refused alone
    /// is claimed for what its channel still holds, when that is less than what was charged.
    async fn claim(&self, requirement: &PaymentRequirements, records: &[ChannelRecord]) -> bool {
        match self.claim_rows(requirement, records, None).await {
            Claimed::Yes => true,
            Claimed::Later => false,
            Claimed::Refused if records.len() > 1 => {
                let mut any = false;
                for record in records {
                    any |= match self.claim_rows(requirement, std::slice::from_ref(record), None).await {
                        Claimed::Yes => true,
                        Claimed::Later => false,
                        Claimed::Refused => self.claim_what_is_held(requirement, record).await,
                    };
                }
                any
            }
            Claimed::Refused => self.claim_what_is_held(requirement, &records[0]).await,
        }
    }

    /// A channel charged more than it holds (its payer withdrew, or several sellers counted it):
    /// what it holds above what is claimed is claimed, the rest is lost.
    async fn claim_what_is_held(&self, requirement: &PaymentRequirements, record: &ChannelRecord) -> bool {
        let held = record.chain.balance;
        if held >= record.charged || held <= record.chain.total_claimed {
            return false;
        }
        tracing::warn!(
            channel = %record.channel_id,
            charged = %record.charged,
            held = %held,
            "a channel holds less than it was charged: claiming what it holds"
        );
        self.claim_rows(requirement, std::slice::from_ref(record), Some(held)).await == Claimed::Yes
    }

    /// One `claimWithSignature` of `records`' latest vouchers, each for what it charged (or
    /// `total`, for a single row).
    async fn claim_rows(
        &self,
        requirement: &PaymentRequirements,
        records: &[ChannelRecord],
        total: Option<AtomicAmount>,
    ) -> Claimed {
        let claims: Vec<ClaimRow> = records
            .iter()
            .filter_map(|r| {
                let voucher = r.voucher.as_ref()?;
                Some(ClaimRow {
                    voucher: ClaimVoucher {
                        channel: r.config.clone(),
                        max_claimable_amount: voucher.signed_max_claimable,
                    },
                    signature: voucher.signature.clone(),
                    total_claimed: total.unwrap_or(r.charged),
                })
            })
            .collect();
        let payload = ClaimPayload { kind: "claim".into(), claims, claim_authorizer_signature: None };
        let envelope = super::envelope(requirement, serde_json::to_value(&payload).unwrap_or_default());
        let answer = match self.facilitator.batch(BatchCall { settle: true, payload: &envelope, requirement }).await {
            Ok(answer) if answer.ok => answer,
            Ok(answer) => {
                tracing::warn!(
                    reason = answer.reason.as_deref().unwrap_or_default(),
                    channels = records.len(),
                    "a claim was refused"
                );
                return Claimed::Refused;
            }
            Err(verdict) => {
                tracing::warn!(
                    ?verdict,
                    channels = records.len(),
                    "a claim could not be settled now; the next pass sends it again"
                );
                return Claimed::Later;
            }
        };
        let reported: Vec<ChannelState> = answer
            .extra
            .as_ref()
            .and_then(|e| e.get("channelStates"))
            .and_then(|v| serde_json::from_value(v.clone()).ok())
            .unwrap_or_default();
        for record in records {
            let state = reported.iter().find(|s| s.channel_id.eq_ignore_ascii_case(&record.channel_id));
            self.claimed(record, total.unwrap_or(record.charged), state).await;
        }
        tracing::info!(
            channels = records.len(),
            transaction = answer.transaction.as_deref().unwrap_or_default(),
            "vouchers claimed"
        );
        Claimed::Yes
    }

    /// Records `claimed` on the channel (read again: a request may have charged meanwhile).
    async fn claimed(&self, record: &ChannelRecord, claimed: AtomicAmount, state: Option<&ChannelState>) {
        for _ in 0..8 {
            let Ok(Some(mut current)) = self.store.get(&record.channel_id).await else { return };
            let version = current.version;
            match state {
                Some(state) => current.chain = state.clone(),
                None => current.chain.total_claimed = current.chain.total_claimed.max(claimed),
            }
            if matches!(self.store.put(&current, Some(version)).await, Ok(true)) {
                return;
            }
        }
        tracing::warn!(channel = %record.channel_id, "a claim could not be recorded; the chain has it, and the next read finds it");
    }
}

/// The receiver's claimed funds (`requirement`'s `payTo` and token) moved out of the escrow in
/// one transfer, through `facilitator`.
pub(crate) async fn sweep(facilitator: &dyn Facilitator, requirement: &PaymentRequirements) {
    let tollgate_protocol::x402::Asset::Token(token) = requirement.asset else { return };
    let payload = SettlePayload { kind: "settle".into(), receiver: requirement.pay_to, token };
    let envelope = super::envelope(requirement, serde_json::to_value(&payload).unwrap_or(Value::Null));
    match facilitator.batch(BatchCall { settle: true, payload: &envelope, requirement }).await {
        Ok(answer) if answer.ok => {
            tracing::info!(transaction = answer.transaction.as_deref().unwrap_or_default(), "claimed funds swept");
        }
        Ok(answer) => tracing::warn!(reason = answer.reason.as_deref().unwrap_or_default(), "a sweep was refused"),
        Err(verdict) => tracing::warn!(?verdict, "a sweep could not be settled now; the next claim sweeps again"),
    }
}
