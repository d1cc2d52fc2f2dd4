//! Who is calling, and may they.
//!
//! [`Authenticator::authenticate`] turns an `Authorization: Bearer` header into a [`Caller`]
//! ([`AuthError::Unauthorized`] otherwise); [`Authenticator::admit`] counts the request against the
//! key's rate limit ([`AuthError::RateLimited`]) and checks the plan grants the endpoint
//! ([`AuthError::Forbidden`]). The API answers these 401, 429 and 403. Verified keys are cached in memory for
//! `limits.key_cache_ttl_secs`, so the steady state costs one hash and two map look-ups; the
//! cache also remembers unknown keys briefly, so a flood of bad keys does not reach storage.

pub mod keys;
pub mod rate_limit;
pub mod sessions;

use std::sync::Arc;
use std::time::Duration;

use moka::sync::Cache;

use self::keys::{KeyDigest, looks_like_key};
use self::rate_limit::{RateDecision, RateLimiter, WINDOW_MS};
use crate::clock::SharedClock;
use crate::plans::{Endpoint, Plan, Plans};
use crate::store::Store;

/// Why a request is not let through.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// No key, or not a valid one.
    #[error("{0}")]
    Unauthorized(String),
    /// The key's plan does not include the endpoint.
    #[error("{0}")]
    Forbidden(String),
    /// The key's rate limit is used up for now.
    #[error("{message}")]
    RateLimited {
        /// What happened.
        message: String,
        /// Seconds until a request would be let through.
        retry_after_secs: u64,
    },
    /// Storage failed.
    #[error("{0}")]
    Internal(String),
}

fn unauthorized(message: &str) -> AuthError {
    AuthError::Unauthorized(message.to_owned())
}

/// An authenticated caller, put in request extensions for handlers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The key's id (never the key).
    pub key_id: String,
    /// The account the key belongs to.
    pub account_id: String,
    /// The key's plan.
    pub plan: Plan,
    /// Requests per minute allowed.
    pub rpm: u32,
    /// The key's lookup (a prefix of its hash, never the key): how a long-lived connection finds
    /// the key again to learn whether it still exists.
    pub lookup: String,
}

/// Dashboard sign-in attempts allowed per minute, over all clients.
pub const LOGINS_PER_MINUTE: u32 = 10;

/// The rate limiter's key for dashboard sign-ins (no API key id looks like it).
const LOGIN_KEY: &str = "dashboard:login";

/// WebSocket messages a key may send per second, over all its connections.
pub const WS_MESSAGES_PER_SECOND: u32 = 20;

/// Refused proofs given back per minute, as a multiple of the plan's requests per minute.
pub const REFUSALS_PER_REQUEST: u32 = 20;

/// Authentication, rate limiting and plan checks.
pub struct Authenticator {
    store: Arc<dyn Store>,
    plans: Plans,
    limiter: Arc<dyn RateLimiter>,
    clock: SharedClock,
    cache: Cache<[u8; 32], Option<Arc<Caller>>>,
    /// Counts [`Self::forget_cached_keys`] calls: a verdict read before one is not cached after it.
    generation: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("plans", &self.plans)
            .field("cached_keys", &self.cache.entry_count())
            .finish_non_exhaustive()
    }
}

impl Authenticator {
    /// An authenticator over `store`, trusting cached verdicts for `cache_ttl`.
    #[must_use]
    pub fn new(
        store: Arc<dyn Store>,
        plans: Plans,
        limiter: Arc<dyn RateLimiter>,
        clock: SharedClock,
        cache_ttl: Duration,
    ) -> Self {
        let cache = Cache::builder().max_capacity(100_000).time_to_live(cache_ttl).build();
        Self { store, plans, limiter, clock, cache, generation: std::sync::atomic::AtomicU64::new(0) }
    }

    /// The plans in force.
    #[must_use]
    pub const fn plans(&self) -> &Plans {
        &self.plans
    }

    /// Identifies the caller from an `Authorization` header value (`Err(())`: not text).
    ///
    /// # Errors
    /// [`AuthError::Unauthorized`] for a missing, malformed, unknown or deleted key;
    /// [`AuthError::Internal`] when storage fails.
    pub async fn authenticate(&self, authorization: Option<Result<&str, ()>>) -> Result<Arc<Caller>, AuthError> {
        let header =
            authorization.ok_or_else(|| unauthorized("missing API key: send 'Authorization: Bearer <API_KEY>'"))?;
        let text = header.map_err(|()| unauthorized("malformed Authorization header"))?;
        let key = text
            .strip_prefix("Bearer ")
            .or_else(|| text.strip_prefix("bearer "))
            .map(str::trim)
            .ok_or_else(|| unauthorized("Authorization must use the Bearer scheme"))?;
        self.authenticate_key(key).await
    }

    /// Identifies the caller from the key text itself (also used for `?api-key=` on WebSocket).
    ///
    /// # Errors
    /// As [`Self::authenticate`].
    pub async fn authenticate_key(&self, key: &str) -> Result<Arc<Caller>, AuthError> {
        if !looks_like_key(key) {
            return Err(unauthorized("invalid API key"));
        }
        let digest = KeyDigest::of(key);
        if let Some(verdict) = self.cache.get(&digest.hash) {
            return verdict.ok_or_else(|| unauthorized("invalid API key"));
        }
        let generation = self.generation.load(std::sync::atomic::Ordering::Acquire);
        let stored = self.store.find_api_key(&digest.lookup()).await.map_err(|e| AuthError::Internal(e.to_string()))?;
        let caller = stored.filter(|k| digest.matches(&k.hash)).map(|k| {
            let rpm = k.rpm.unwrap_or_else(|| self.plans.get(k.plan).rpm);
            Arc::new(Caller { key_id: k.id, account_id: k.account_id, plan: k.plan, rpm, lookup: digest.lookup() })
        });
        if let Some(c) = &caller {
            // Once per cache period: good enough for "last used", and off the hot path.
            if let Err(e) = self.store.touch_api_key(&c.key_id, self.clock.now()).await {
                tracing::warn!(error = %e, key_id = %c.key_id, "could not record key use");
            }
        }
        // A key deleted while this was read (its deletion announced meanwhile) must not be
        // trusted for a whole cache period: the verdict is kept only if no deletion came since.
        if self.generation.load(std::sync::atomic::Ordering::Acquire) == generation {
            self.cache.insert(digest.hash, caller.clone());
            // A deletion between the check and the insert: take it back out.
            if self.generation.load(std::sync::atomic::Ordering::Acquire) != generation {
                self.cache.invalidate(&digest.hash);
            }
        }
        caller.ok_or_else(|| unauthorized("invalid API key"))
    }

    /// Counts the request against the caller's limit, then checks the plan grants `endpoint`.
    ///
    /// # Errors
    /// [`AuthError::RateLimited`] or [`AuthError::Forbidden`], with the decision (for headers).
    pub async fn admit(&self, caller: &Caller, endpoint: Endpoint) -> Result<RateDecision, (AuthError, RateDecision)> {
        let now = self.clock.now_millis();
        let decision = self.limiter.check(&caller.key_id, caller.rpm, WINDOW_MS, now).await;
        if !decision.allowed {
            crate::telemetry::rate_limited(caller.plan.as_str());
            let secs = decision.retry_after_secs(now);
            let message = format!("rate limit of {} requests per minute exceeded; retry in {secs} s", caller.rpm);
            return Err((AuthError::RateLimited { message, retry_after_secs: secs }, decision));
        }
        if !self.plans.get(caller.plan).allows(endpoint) {
            let err = AuthError::Forbidden(format!("the {} plan does not include this endpoint", caller.plan));
            return Err((err, decision));
        }
        Ok(decision)
    }

    /// A request of `caller` ended in a refused payment proof: it is given back to the key's
    /// window, so proofs a stranger hands the seller (which the seller forwards with its key)
    /// never take a paid request's place. Refusals given back are themselves counted, in a
    /// window of [`REFUSALS_PER_REQUEST`] × the plan's limit; past it they count as requests,
    /// so a key cannot be an unlimited free verification oracle.
    /// `counted` is the decision that admitted the request: the place goes back to that window
    /// only.
    pub async fn forgive_refusal(&self, caller: &Caller, counted: &RateDecision) {
        let now = self.clock.now_millis();
        let refusals = format!("{}:refused", caller.key_id);
        let limit = caller.rpm.saturating_mul(REFUSALS_PER_REQUEST);
        if self.limiter.check(&refusals, limit, WINDOW_MS, now).await.allowed {
            self.limiter.give_back(&caller.key_id, counted, now).await;
        }
    }

    /// Counts one WebSocket message of `caller`'s key: at most [`WS_MESSAGES_PER_SECOND`] a
    /// second for all the key's connections together (on every instance sharing the limiter).
    pub async fn admit_ws_message(&self, caller: &Caller) -> bool {
        let key = format!("{}:ws", caller.key_id);
        self.limiter.check(&key, WS_MESSAGES_PER_SECOND, 1_000, self.clock.now_millis()).await.allowed
    }

    /// Counts one dashboard sign-in attempt: at most [`LOGINS_PER_MINUTE`] a minute, over every
    /// client (and every instance sharing the limiter).
    pub async fn admit_login(&self) -> RateDecision {
        self.limiter.check(LOGIN_KEY, LOGINS_PER_MINUTE, WINDOW_MS, self.clock.now_millis()).await
    }

    /// Gives a successful sign-in's attempt back.
    pub async fn forgive_login(&self, counted: &RateDecision) {
        self.limiter.give_back(LOGIN_KEY, counted, self.clock.now_millis()).await;
    }

    /// Where rate limits are counted right now.
    #[must_use]
    pub fn rate_limit_counting(&self) -> rate_limit::Counting {
        self.limiter.counting()
    }

    /// Cached verdicts right now (after [`Self::cache_sync`]).
    #[must_use]
    pub fn cached_keys(&self) -> u64 {
        self.cache.entry_count()
    }

    /// Applies the cache's pending maintenance (so counts are exact).
    pub fn cache_sync(&self) {
        self.cache.run_pending_tasks();
    }

    /// Whether `caller`'s key still exists (a connection opened with it asks this now and then).
    ///
    /// # Errors
    /// [`AuthError::Internal`] when storage fails.
    pub async fn still_valid(&self, caller: &Caller) -> Result<bool, AuthError> {
        let stored = self.store.find_api_key(&caller.lookup).await.map_err(|e| AuthError::Internal(e.to_string()))?;
        Ok(stored.is_some_and(|k| k.id == caller.key_id))
    }

    /// Forgets every cached verdict (after a key is deleted, here or on another instance).
    pub fn forget_cached_keys(&self) {
        self.generation.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        self.cache.invalidate_all();
    }
}
