//! Signed webhooks: endpoints per account, and the sender that works through the outbox.
//!
//! Every payment change queues one delivery per endpoint of each account that may see the
//! payment, in the transaction of the change (the store does it: [`crate::store::WebhookStore`]).
//! [`Sender`] claims due deliveries (several instances never send one row at once), POSTs each
//! body signed with `Tollgate-Signature: t=…,v1=…` ([`tollgate_protocol::webhook`]), and records
//! the outcome: delivered on a 2xx answer, otherwise retried with exponential backoff until the
//! retry period (a day by default) is over, then `failed`. A sender killed mid-attempt leaves a
//! claim that lapses, and the delivery is sent again: at least once, deduplicated by receivers on
//! the event id.
//!
//! The signing secret (`whsec_…`) is shown once, when the endpoint is registered, and kept sealed
//! under the master key.

pub mod target;

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use rand::TryRngCore as _;
use rand::rngs::OsRng;
use tollgate_protocol::redact::redact_urls;
use tollgate_protocol::webhook::{SIGNATURE_HEADER, sign};

use crate::clock::SharedClock;
use crate::config::WebhookSettings;
use crate::store::{DeliveryOutcome, DueDelivery, Store, StoreError, StoredWebhookEndpoint};
use crate::wallets::MasterKey;

/// Most endpoints one account may register.
pub const MAX_ENDPOINTS_PER_ACCOUNT: u32 = 16;
/// Longest description kept.
pub const MAX_DESCRIPTION_CHARS: usize = 200;
/// Longest wait between two attempts.
pub const MAX_RETRY_DELAY: Duration = Duration::from_secs(3600);
/// Deliveries claimed per pass.
const BATCH: u32 = 32;
/// How often the sender looks for due deliveries.
pub const SEND_EVERY: Duration = Duration::from_millis(500);

/// Why an endpoint could not be registered or removed.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// The request is not acceptable (URL, description).
    #[error("{0}")]
    Invalid(String),
    /// The account has as many endpoints as it may.
    #[error("an account has at most {MAX_ENDPOINTS_PER_ACCOUNT} webhook endpoints; delete one first")]
    TooMany,
    /// No master key to seal the signing secret with.
    #[error("webhooks need TOLLGATE_MASTER_KEY, which keeps their signing secrets sealed")]
    NoMasterKey,
    /// No such endpoint for this account.
    #[error("no webhook endpoint {0}")]
    NotFound(String),
    /// Storage or sealing failed.
    #[error("{0}")]
    Failed(String),
}

impl From<StoreError> for WebhookError {
    fn from(e: StoreError) -> Self {
        Self::Failed(e.to_string())
    }
}

/// A registered endpoint with its signing secret, shown this once.
#[derive(Debug)]
pub struct Registered {
    /// The endpoint.
    pub endpoint: StoredWebhookEndpoint,
    /// `whsec_…`.
    pub secret: String,
}

/// Registers `url` for `account_id`'s payment events.
///
/// # Errors
/// [`WebhookError::Invalid`] for a URL that is not allowed ([`target::check_url`]) or a long
/// description; [`WebhookError::TooMany`]; [`WebhookError::NoMasterKey`] without a master key.
pub async fn register(
    store: &dyn Store,
    master: Option<&MasterKey>,
    settings: &WebhookSettings,
    account_id: &str,
    url: &str,
    description: Option<String>,
    now: DateTime<Utc>,
) -> Result<Registered, WebhookError> {
    let master = master.ok_or(WebhookError::NoMasterKey)?;
    let url = target::check_url(url.trim(), settings).await.map_err(WebhookError::Invalid)?;
    let description = description.map(|d| d.trim().to_owned()).filter(|d| !d.is_empty());
    if description.as_ref().is_some_and(|d| d.chars().count() > MAX_DESCRIPTION_CHARS) {
        return Err(WebhookError::Invalid(format!("description is longer than {MAX_DESCRIPTION_CHARS} characters")));
    }
    if description.as_ref().is_some_and(|d| d.chars().any(char::is_control)) {
        return Err(WebhookError::Invalid("description must not contain control characters".into()));
    }
    let mut bytes = [0u8; 32];
    OsRng.try_fill_bytes(&mut bytes).map_err(|e| WebhookError::Failed(e.to_string()))?;
    let secret = format!("whsec_{}", bs58::encode(bytes).into_string());
    let id = format!("whe_{}", ulid::Ulid::new());
    let sealed_secret = master.seal(&id, secret.as_bytes()).map_err(|e| WebhookError::Failed(e.to_string()))?;
    let endpoint = StoredWebhookEndpoint {
        id,
        account_id: account_id.to_owned(),
        url: url.to_string(),
        description,
        sealed_secret,
        created_at: now,
    };
    if !store.insert_webhook_endpoint(&endpoint, MAX_ENDPOINTS_PER_ACCOUNT).await? {
        return Err(WebhookError::TooMany);
    }
    Ok(Registered { endpoint, secret })
}

/// When to try again after `attempts` failed attempts (counting the one just made), or `None`
/// when the retry period since `queued` is over: `retry_base_secs` × 2^(attempts − 1), at most
/// [`MAX_RETRY_DELAY`].
#[must_use]
pub fn next_attempt(
    settings: &WebhookSettings,
    attempts: u32,
    queued: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    let factor = 1u64 << attempts.saturating_sub(1).min(20);
    let delay = settings.retry_base_secs.saturating_mul(factor).min(MAX_RETRY_DELAY.as_secs());
    let next = now + chrono::Duration::seconds(i64::try_from(delay).unwrap_or(i64::MAX / 1000));
    let give_up = queued + chrono::Duration::seconds(i64::try_from(settings.retry_for_secs).unwrap_or(i64::MAX / 1000));
    (next <= give_up).then_some(next)
}

/// Sends due deliveries.
#[derive(Clone)]
pub struct Sender {
    store: Arc<dyn Store>,
    master: Option<Arc<MasterKey>>,
    settings: WebhookSettings,
    clock: SharedClock,
    http: reqwest::Client,
}

impl std::fmt::Debug for Sender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sender").field("settings", &self.settings).finish_non_exhaustive()
    }
}

impl Sender {
    /// A sender over `store`, opening signing secrets with `master`.
    ///
    /// # Errors
    /// When the HTTP client cannot be built (TLS roots).
    pub fn new(
        store: Arc<dyn Store>,
        master: Option<Arc<MasterKey>>,
        settings: WebhookSettings,
        clock: SharedClock,
    ) -> Result<Self, String> {
        let mut http = reqwest::Client::builder()
            .timeout(Duration::from_secs(settings.timeout_secs))
            .connect_timeout(Duration::from_secs(settings.timeout_secs.min(5)))
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .user_agent(concat!("Tollgate-Webhooks/", env!("CARGO_PKG_VERSION")));
        if !settings.allow_private_targets {
            http = http.dns_resolver(Arc::new(target::PublicOnly));
        }
        let http = http.build().map_err(|e| format!("cannot build the webhook HTTP client: {e}"))?;
        Ok(Self { store, master, settings, clock, http })
    }

    /// Claims up to `limit` due deliveries, at most one per endpoint and none of the endpoints in
    /// `busy` (an endpoint that hangs holds one sending slot, not all of them); the extra ones
    /// are released at once.
    ///
    /// # Errors
    /// When the outbox cannot be read.
    pub async fn claim(&self, limit: u32, busy: &[String]) -> Result<Vec<DueDelivery>, StoreError> {
        let now = self.clock.now();
        let hold = chrono::Duration::seconds(i64::try_from(self.settings.timeout_secs).unwrap_or(60) + 30);
        let claimed = self.store.claim_webhook_deliveries(now, limit, now + hold, busy).await?;
        let mut seen = std::collections::HashSet::new();
        let (take, extra): (Vec<_>, Vec<_>) = claimed.into_iter().partition(|d| seen.insert(d.endpoint_id.clone()));
        if !extra.is_empty() {
            let ids: Vec<i64> = extra.iter().map(|d| d.id).collect();
            if let Err(e) = self.store.release_webhook_claims(&ids).await {
                tracing::warn!(error = %e, "could not release webhook claims; they lapse on their own");
            }
        }
        Ok(take)
    }

    /// One attempt at `due`, its outcome recorded.
    pub async fn attempt(&self, due: DueDelivery) {
        let outcome = self.deliver(&due).await;
        let at = self.clock.now();
        crate::telemetry::webhook_attempt(match &outcome {
            DeliveryOutcome::Delivered { .. } => "delivered",
            DeliveryOutcome::Retry { .. } => "retry",
            DeliveryOutcome::Failed { .. } => "failed",
        });
        match &outcome {
            DeliveryOutcome::Delivered { .. } => {
                tracing::debug!(delivery = due.id, event = %due.event_id, "webhook delivered");
            }
            DeliveryOutcome::Retry { error, next_at, .. } => {
                tracing::info!(delivery = due.id, event = %due.event_id, %error, retry_at = %next_at, "webhook not delivered; will retry");
            }
            DeliveryOutcome::Failed { error, .. } => {
                tracing::warn!(delivery = due.id, event = %due.event_id, %error, "webhook delivery given up");
            }
        }
        if let Err(e) = self.store.record_webhook_attempt(due.id, at, &outcome).await {
            tracing::warn!(delivery = due.id, error = %e, "could not record a webhook attempt; it will be sent again");
        }
    }

    /// One attempt at `due`.
    async fn deliver(&self, due: &DueDelivery) -> DeliveryOutcome {
        let endpoint = match self.store.webhook_endpoint(&due.endpoint_id).await {
            Ok(Some(e)) => e,
            Ok(None) => return DeliveryOutcome::Failed { status: None, error: "the endpoint was deleted".into() },
            Err(e) => return self.retry(due, None, format!("storage: {e}")),
        };
        let Some(master) = &self.master else {
            return self.retry(due, None, "no master key to open the signing secret with".into());
        };
        // Not `Failed`: a misconfigured instance (another master key) must not give up deliveries
        // that an instance with the right key can send.
        let secret = match master.open(&endpoint.id, &endpoint.sealed_secret).map(String::from_utf8) {
            Ok(Ok(s)) => s,
            _ => return self.retry(due, None, "this instance's master key does not open the signing secret".into()),
        };
        let url = match reqwest::Url::parse(&endpoint.url) {
            Ok(u) if target::literal_host_allowed(&u, &self.settings) => u,
            Ok(_) => {
                return DeliveryOutcome::Failed { status: None, error: "blocked: not a public address".into() };
            }
            Err(_) => return DeliveryOutcome::Failed { status: None, error: "the endpoint URL is invalid".into() },
        };
        let signature = sign(&secret, self.clock.now().timestamp(), due.body.as_bytes());
        let sent = self
            .http
            .post(url)
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(SIGNATURE_HEADER, signature)
            .header("Tollgate-Event-Id", &due.event_id)
            .body(due.body.clone())
            .send()
            .await;
        match sent {
            Ok(response) if response.status().is_success() => {
                DeliveryOutcome::Delivered { status: response.status().as_u16() }
            }
            Ok(response) => {
                let status = response.status();
                self.retry(due, Some(status.as_u16()), format!("the endpoint answered {status}"))
            }
            Err(e) => self.retry(due, None, describe(&e)),
        }
    }

    fn retry(&self, due: &DueDelivery, status: Option<u16>, error: String) -> DeliveryOutcome {
        match next_attempt(&self.settings, due.attempts + 1, due.created_at, self.clock.now()) {
            Some(next_at) => DeliveryOutcome::Retry { status, error, next_at },
            None => DeliveryOutcome::Failed { status, error },
        }
    }
}

/// A request error with its causes, without the URL's path or query.
fn describe(e: &reqwest::Error) -> String {
    let mut text = if e.is_timeout() { "timed out".to_owned() } else { "could not be reached".to_owned() };
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    redact_urls(&text)
}

/// Sends due deliveries until `stop`: up to [`BATCH`] attempts in flight, at most one per
/// endpoint, each slot refilled as soon as its attempt ends (a slow endpoint delays only its own
/// deliveries), and the outbox looked at every [`SEND_EVERY`].
pub async fn send_periodically(sender: Sender, mut stop: tokio::sync::watch::Receiver<bool>) {
    let mut in_flight: tokio::task::JoinSet<()> = tokio::task::JoinSet::new();
    // The endpoint of each attempt in flight, by task (a task that panicked is still cleared).
    let mut busy: std::collections::HashMap<tokio::task::Id, String> = std::collections::HashMap::new();
    let mut every = tokio::time::interval(SEND_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = every.tick() => {}
            Some(done) = in_flight.join_next_with_id(), if !in_flight.is_empty() => {
                let id = match done {
                    Ok((id, ())) => id,
                    Err(e) => {
                        tracing::error!(error = %e, "a webhook attempt failed unexpectedly; it is sent again once its claim lapses");
                        e.id()
                    }
                };
                busy.remove(&id);
            }
            _ = stop.changed() => {
                in_flight.abort_all();
                return;
            }
        }
        let free = BATCH.saturating_sub(u32::try_from(in_flight.len()).unwrap_or(BATCH));
        if free == 0 {
            continue;
        }
        let skip: Vec<String> = busy.values().cloned().collect();
        match sender.claim(free, &skip).await {
            Ok(due) => {
                for delivery in due {
                    let endpoint = delivery.endpoint_id.clone();
                    let sender = sender.clone();
                    let task = in_flight.spawn(async move { sender.attempt(delivery).await });
                    busy.insert(task.id(), endpoint);
                }
            }
            Err(e) => tracing::warn!(error = %e, "could not read the webhook outbox"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_and_stop_after_the_retry_period() {
        let settings = WebhookSettings { retry_base_secs: 10, retry_for_secs: 86_400, ..WebhookSettings::default() };
        let t0 = DateTime::<Utc>::from_timestamp(1_800_000_000, 0).unwrap_or_default();
        let delays: Vec<i64> =
            (1..=12).map(|n| (next_attempt(&settings, n, t0, t0).unwrap_or(t0) - t0).num_seconds()).collect();
        assert_eq!(delays, [10, 20, 40, 80, 160, 320, 640, 1280, 2560, 3600, 3600, 3600]);
        // Near the end of the day, a retry that would land after it is not made.
        let late = t0 + chrono::Duration::seconds(86_400 - 5);
        assert_eq!(next_attempt(&settings, 1, t0, late), None);
        assert!(next_attempt(&settings, 1, t0, late - chrono::Duration::seconds(10)).is_some());
        // A delivery keeps being retried, an hour apart at most, for the whole day.
        let mut now = t0;
        let mut attempts = 0;
        while let Some(next) = next_attempt(&settings, attempts + 1, t0, now) {
            now = next;
            attempts += 1;
        }
        assert!((t0 + chrono::Duration::hours(23)) < now && now <= t0 + chrono::Duration::days(1), "{now}");
        assert_eq!(attempts, 31);
        assert_eq!(next_attempt(&settings, u32::MAX, t0, t0), Some(t0 + chrono::Duration::hours(1)));
    }
}
