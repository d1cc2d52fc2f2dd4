//! Per-key rate limiting in fixed windows.
//!
//! A key's window opens at its first request and lasts `window_ms` (one minute for API requests,
//! one second for WebSocket messages); within it the key may make `limit` requests, and request
//! `limit + 1` is refused until the window closes. The answer carries what the `X-RateLimit-*`
//! and `Retry-After` headers need. Fixed windows make `X-RateLimit-Reset` an exact promise (the
//! moment the full limit is available again), at the price of allowing up to twice the limit
//! across a window boundary.
//!
//! Two implementations of [`RateLimiter`]:
//! * [`InMemoryRateLimiter`], the single-instance default;
//! * [`RedisRateLimiter`], shared by every instance pointed at one Redis (`redis_url`): one Lua
//!   script per request, run atomically by Redis, so instances behind a load balancer hold one
//!   limit together. When Redis cannot be asked, it **fails open to per-instance limits**: the
//!   request is counted by an in-process limiter instead (each instance then enforces the plan on
//!   its own), a warning is logged (at most every [`WARN_EVERY_MS`]) and
//!   [`RedisRateLimiter::failures`] counts it. A Redis outage never refuses a paying request.
//!
//! Windows are timed with the facilitator's clock (passed in as `now_ms`), never Redis's, so the
//! two implementations answer alike.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};
use std::time::Duration;

use async_trait::async_trait;

/// Length of an API key's request window.
pub const WINDOW_MS: i64 = 60_000;

/// The verdict for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateDecision {
    /// Whether the request may proceed.
    pub allowed: bool,
    /// Requests allowed per window.
    pub limit: u32,
    /// Requests left in the current window after this one.
    pub remaining: u32,
    /// When the window closes (ms since epoch).
    pub reset_at_ms: i64,
}

impl RateDecision {
    /// Whole seconds until the window closes, at least 1 (for `Retry-After`).
    #[must_use]
    pub fn retry_after_secs(&self, now_ms: i64) -> u64 {
        let ms = (self.reset_at_ms - now_ms).max(0);
        u64::try_from((ms + 999) / 1000).unwrap_or(1).max(1)
    }

    /// The reset moment in Unix seconds, rounded up (for `X-RateLimit-Reset`).
    #[must_use]
    pub fn reset_epoch_secs(&self) -> i64 {
        (self.reset_at_ms + 999).div_euclid(1000)
    }

    fn of(allowed: bool, limit: u32, count: u32, reset_at_ms: i64) -> Self {
        Self { allowed, limit, remaining: limit.saturating_sub(count), reset_at_ms }
    }
}

/// Where requests are counted right now (for `/readyz`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counting {
    /// In this process only (no shared store configured).
    InProcess,
    /// In the store every instance shares.
    Shared,
    /// A shared store is configured but its last request failed: counted in this process instead.
    Degraded {
        /// Requests counted in process because of it, since start.
        fallbacks: u64,
    },
}

/// Counts requests per key.
#[async_trait]
pub trait RateLimiter: Send + Sync + 'static {
    /// Where requests are counted right now.
    fn counting(&self) -> Counting {
        Counting::InProcess
    }

    /// Counts one request of `key` at `now_ms` against `limit` per window of `window_ms`.
    async fn check(&self, key: &str, limit: u32, window_ms: i64, now_ms: i64) -> RateDecision;

    /// Gives one request back to the window of `key` that `counted` it (nothing once that window
    /// has closed: a place given back never carries over into the next window).
    async fn give_back(&self, key: &str, counted: &RateDecision, now_ms: i64);
}

#[derive(Debug, Clone, Copy)]
struct Window {
    end_ms: i64,
    count: u32,
}

/// In-process limiter (one map entry per active key).
#[derive(Debug, Default)]
pub struct InMemoryRateLimiter {
    windows: Mutex<HashMap<String, Window>>,
}

/// Above this many entries, closed windows are swept on insert.
const SWEEP_THRESHOLD: usize = 10_000;

impl InMemoryRateLimiter {
    /// An empty limiter.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    fn check_now(&self, key: &str, limit: u32, window_ms: i64, now_ms: i64) -> RateDecision {
        // A poisoned lock only means another request panicked mid-update; the counts are still usable.
        let mut windows = self.windows.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let window = match windows.get_mut(key) {
            Some(w) if now_ms < w.end_ms => w,
            Some(w) => {
                *w = Window { end_ms: now_ms + window_ms, count: 0 };
                w
            }
            None => {
                if windows.len() >= SWEEP_THRESHOLD {
                    windows.retain(|_, w| now_ms < w.end_ms);
                }
                windows.entry(key.to_owned()).or_insert(Window { end_ms: now_ms + window_ms, count: 0 })
            }
        };
        let allowed = window.count < limit;
        if allowed {
            window.count += 1;
        }
        RateDecision::of(allowed, limit, window.count, window.end_ms)
    }

    fn give_back_now(&self, key: &str, counted: &RateDecision, now_ms: i64) {
        let mut windows = self.windows.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(w) = windows.get_mut(key)
            && now_ms < w.end_ms
            && w.end_ms == counted.reset_at_ms
        {
            w.count = w.count.saturating_sub(1);
        }
    }
}

#[async_trait]
impl RateLimiter for InMemoryRateLimiter {
    async fn check(&self, key: &str, limit: u32, window_ms: i64, now_ms: i64) -> RateDecision {
        self.check_now(key, limit, window_ms, now_ms)
    }

    async fn give_back(&self, key: &str, counted: &RateDecision, now_ms: i64) {
        self.give_back_now(key, counted, now_ms);
    }
}

/// Counts one request in the key's window (a hash `{e: window end ms, n: count}`), opening a new
/// window when there is none or it has closed. Returns `{allowed, count, window end}`.
const CHECK_SCRIPT: &str = r"
local now = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local window = tonumber(ARGV[3])
local e = tonumber(redis.call('HGET', KEYS[1], 'e'))
if e == nil or now >= e then
  e = now + window
  redis.call('HSET', KEYS[1], 'e', e, 'n', 0)
  redis.call('PEXPIRE', KEYS[1], window + 60000)
end
local n = tonumber(redis.call('HGET', KEYS[1], 'n'))
if n < limit then
  n = redis.call('HINCRBY', KEYS[1], 'n', 1)
  return {1, n, e}
end
return {0, n, e}
";

/// Gives one request back to the window ending at `ARGV[2]`, if it is still the open one.
const GIVE_BACK_SCRIPT: &str = r"
local e = tonumber(redis.call('HGET', KEYS[1], 'e'))
if e ~= nil and e == tonumber(ARGV[2]) and tonumber(ARGV[1]) < e then
  if tonumber(redis.call('HGET', KEYS[1], 'n')) > 0 then
    redis.call('HINCRBY', KEYS[1], 'n', -1)
  end
end
return 0
";

/// Redis key prefix of the windows.
pub const REDIS_PREFIX: &str = "tollgate:rate:";
/// Longest wait for Redis's answer (or a connection) before falling back to in-process limits.
pub const REDIS_TIMEOUT: Duration = Duration::from_millis(500);
/// Least time between two "Redis is unavailable" warnings, and between two reconnection attempts.
pub const WARN_EVERY_MS: i64 = 10_000;
/// After Redis failed a request, it is not asked again for this long (requests are counted in
/// process meanwhile), so a stalled Redis costs one request [`REDIS_TIMEOUT`] per pause, not
/// every request.
pub const PAUSE_AFTER_FAILURE_MS: i64 = 2_000;

/// Limits shared through Redis by every instance that uses the same server.
pub struct RedisRateLimiter {
    client: redis::Client,
    connection: RwLock<Option<redis::aio::ConnectionManager>>,
    connecting: tokio::sync::Mutex<()>,
    last_connect_attempt_ms: AtomicI64,
    check_script: redis::Script,
    give_back_script: redis::Script,
    fallback: InMemoryRateLimiter,
    failures: AtomicU64,
    last_warning_ms: AtomicI64,
    /// Whether the last request was counted by Redis.
    last_ok: std::sync::atomic::AtomicBool,
    /// Until when Redis is not asked (ms), after a failed request.
    paused_until_ms: AtomicI64,
}

impl std::fmt::Debug for RedisRateLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the URL: it may carry a password.
        f.debug_struct("RedisRateLimiter").field("failures", &self.failures()).finish_non_exhaustive()
    }
}

impl RedisRateLimiter {
    /// A limiter on the Redis at `url` (`redis://[:password@]host:port[/db]`). Connects now;
    /// when Redis cannot be reached yet, the limiter starts in its fallback and keeps trying.
    ///
    /// # Errors
    /// When `url` is not a Redis URL.
    pub async fn connect(url: &str) -> Result<Self, String> {
        let client = redis::Client::open(url).map_err(|e| format!("not a Redis URL ({})", e.category()))?;
        let limiter = Self {
            client,
            connection: RwLock::new(None),
            connecting: tokio::sync::Mutex::new(()),
            last_connect_attempt_ms: AtomicI64::new(i64::MIN),
            check_script: redis::Script::new(CHECK_SCRIPT),
            give_back_script: redis::Script::new(GIVE_BACK_SCRIPT),
            fallback: InMemoryRateLimiter::new(),
            failures: AtomicU64::new(0),
            last_warning_ms: AtomicI64::new(i64::MIN),
            last_ok: std::sync::atomic::AtomicBool::new(false),
            paused_until_ms: AtomicI64::new(i64::MIN),
        };
        match limiter.reconnect(0).await {
            Ok(_) => limiter.last_ok.store(true, Ordering::Relaxed),
            Err(e) => {
                tracing::warn!(error = %e, "cannot reach Redis yet: rate limits are counted per instance until it answers");
            }
        }
        Ok(limiter)
    }

    /// Requests counted in-process because Redis could not be asked, since start.
    #[must_use]
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    /// Whether the limiter holds a connection to Redis right now.
    #[must_use]
    pub fn connected(&self) -> bool {
        self.connection.read().unwrap_or_else(std::sync::PoisonError::into_inner).is_some()
    }

    async fn reconnect(&self, now_ms: i64) -> Result<redis::aio::ConnectionManager, String> {
        // One attempt at a time; requests meanwhile are counted in-process rather than wait.
        let Ok(_one_at_a_time) = self.connecting.try_lock() else {
            return Err("not connected (reconnecting)".into());
        };
        if let Some(c) = self.current() {
            return Ok(c);
        }
        self.last_connect_attempt_ms.store(now_ms, Ordering::Relaxed);
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(REDIS_TIMEOUT)
            .set_response_timeout(REDIS_TIMEOUT)
            .set_number_of_retries(1);
        let connection =
            tokio::time::timeout(REDIS_TIMEOUT * 2, self.client.get_connection_manager_with_config(config))
                .await
                .map_err(|_| "timed out connecting".to_owned())?
                .map_err(|e| e.to_string())?;
        *self.connection.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(connection.clone());
        tracing::info!("rate limits are shared through Redis");
        Ok(connection)
    }

    fn current(&self) -> Option<redis::aio::ConnectionManager> {
        self.connection.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// The connection, or a new one when none is held and the last attempt is old enough.
    async fn connection(&self, now_ms: i64) -> Result<redis::aio::ConnectionManager, String> {
        if let Some(c) = self.current() {
            return Ok(c);
        }
        let last = self.last_connect_attempt_ms.load(Ordering::Relaxed);
        if now_ms.saturating_sub(last) < WARN_EVERY_MS && last <= now_ms {
            return Err("not connected (reconnecting later)".into());
        }
        self.reconnect(now_ms).await
    }

    fn failed(&self, now_ms: i64, error: &str) {
        self.last_ok.store(false, Ordering::Relaxed);
        self.failures.fetch_add(1, Ordering::Relaxed);
        let last = self.last_warning_ms.load(Ordering::Relaxed);
        if (now_ms.saturating_sub(last) >= WARN_EVERY_MS || last > now_ms)
            && self.last_warning_ms.compare_exchange(last, now_ms, Ordering::Relaxed, Ordering::Relaxed).is_ok()
        {
            tracing::warn!(
                error,
                failures = self.failures(),
                "Redis is unavailable: rate limits are counted per instance until it answers again"
            );
        }
    }

    /// Forgets the connection after a failed request: answers still owed on it (lost, or only
    /// late) must never be read as another request's. The next request after the pause opens a
    /// new one.
    fn drop_connection(&self) {
        *self.connection.write().unwrap_or_else(std::sync::PoisonError::into_inner) = None;
        self.last_connect_attempt_ms.store(i64::MIN, Ordering::Relaxed);
    }

    fn paused(&self, now_ms: i64) -> bool {
        now_ms < self.paused_until_ms.load(Ordering::Relaxed)
    }

    fn pause(&self, now_ms: i64) {
        self.paused_until_ms.store(now_ms.saturating_add(PAUSE_AFTER_FAILURE_MS), Ordering::Relaxed);
    }

    fn redis_key(key: &str) -> String {
        format!("{REDIS_PREFIX}{key}")
    }
}

#[async_trait]
impl RateLimiter for RedisRateLimiter {
    fn counting(&self) -> Counting {
        if self.last_ok.load(Ordering::Relaxed) {
            Counting::Shared
        } else {
            Counting::Degraded { fallbacks: self.failures() }
        }
    }

    async fn check(&self, key: &str, limit: u32, window_ms: i64, now_ms: i64) -> RateDecision {
        if self.paused(now_ms) {
            self.failed(now_ms, "paused after a failure");
            return self.fallback.check_now(key, limit, window_ms, now_ms);
        }
        match self.connection(now_ms).await {
            Ok(mut connection) => {
                let mut invocation = self.check_script.key(Self::redis_key(key));
                invocation.arg(now_ms).arg(limit).arg(window_ms);
                let answer: redis::RedisResult<(i64, i64, i64)> =
                    tokio::time::timeout(REDIS_TIMEOUT, invocation.invoke_async(&mut connection))
                        .await
                        .unwrap_or_else(|_| Err((redis::ErrorKind::IoError, "timed out").into()));
                match answer {
                    Ok((allowed, count, end_ms)) => {
                        self.last_ok.store(true, Ordering::Relaxed);
                        let count = u32::try_from(count).unwrap_or(u32::MAX);
                        return RateDecision::of(allowed == 1, limit, count, end_ms);
                    }
                    Err(e) => {
                        self.failed(now_ms, &e.to_string());
                        self.pause(now_ms);
                        self.drop_connection();
                    }
                }
            }
            Err(e) => self.failed(now_ms, &e),
        }
        self.fallback.check_now(key, limit, window_ms, now_ms)
    }

    async fn give_back(&self, key: &str, counted: &RateDecision, now_ms: i64) {
        // A decision the fallback made is given back there (it knows that window); otherwise Redis.
        self.fallback.give_back_now(key, counted, now_ms);
        if self.paused(now_ms) {
            return;
        }
        if let Some(mut connection) = self.current() {
            let mut invocation = self.give_back_script.key(Self::redis_key(key));
            invocation.arg(now_ms).arg(counted.reset_at_ms);
            let answer: redis::RedisResult<i64> =
                tokio::time::timeout(REDIS_TIMEOUT, invocation.invoke_async(&mut connection))
                    .await
                    .unwrap_or_else(|_| Err((redis::ErrorKind::IoError, "timed out").into()));
            if let Err(e) = answer {
                self.failed(now_ms, &e.to_string());
                self.pause(now_ms);
                self.drop_connection();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_request_given_back_frees_its_place_in_the_same_window_only() {
        let limiter = InMemoryRateLimiter::new();
        let first = limiter.check("k", 1, WINDOW_MS, 0).await;
        assert!(first.allowed);
        assert!(!limiter.check("k", 1, WINDOW_MS, 1).await.allowed);
        limiter.give_back("k", &first, 2).await;
        let second = limiter.check("k", 1, WINDOW_MS, 3).await;
        assert!(second.allowed, "the place given back is taken again");
        limiter.give_back("k", &second, WINDOW_MS + 5).await; // the window has closed: nothing to give back
        let next = limiter.check("k", 1, WINDOW_MS, WINDOW_MS + 6).await;
        assert!(next.allowed);
        // A request counted in the old window, refused after the new one opened, gives nothing back
        // to the new window (no carrying places over windows).
        limiter.give_back("k", &second, WINDOW_MS + 7).await;
        assert!(!limiter.check("k", 1, WINDOW_MS, WINDOW_MS + 8).await.allowed);
        limiter.give_back("unknown", &next, 0).await;
    }

    #[tokio::test]
    async fn the_request_after_the_limit_is_refused_until_the_window_closes() {
        let rl = InMemoryRateLimiter::new();
        let t0 = 1_000_000;
        for i in 0..100 {
            let d = rl.check("k", 100, WINDOW_MS, t0 + i).await;
            assert!(d.allowed, "request {} refused", i + 1);
            assert_eq!(d.remaining, 99 - u32::try_from(i).unwrap());
        }
        let refused = rl.check("k", 100, WINDOW_MS, t0 + 30_000).await;
        assert!(!refused.allowed);
        assert_eq!(refused.remaining, 0);
        assert_eq!(refused.reset_at_ms, t0 + WINDOW_MS);
        assert_eq!(refused.retry_after_secs(t0 + 30_000), 30);
        // Another key is not affected.
        assert!(rl.check("other", 100, WINDOW_MS, t0 + 30_000).await.allowed);
        // Just before the window closes: still refused. At the boundary: a fresh window.
        assert!(!rl.check("k", 100, WINDOW_MS, t0 + WINDOW_MS - 1).await.allowed);
        let fresh = rl.check("k", 100, WINDOW_MS, t0 + WINDOW_MS).await;
        assert!(fresh.allowed);
        assert_eq!(fresh.remaining, 99);
    }

    #[test]
    fn retry_after_is_at_least_one_second() {
        let d = RateDecision { allowed: false, limit: 1, remaining: 0, reset_at_ms: 10_500 };
        assert_eq!(d.retry_after_secs(10_499), 1);
        assert_eq!(d.retry_after_secs(20_000), 1);
        assert_eq!(d.reset_epoch_secs(), 11);
    }

    #[tokio::test]
    async fn sweeps_closed_windows() {
        let rl = InMemoryRateLimiter::new();
        for i in 0..SWEEP_THRESHOLD {
            rl.check(&format!("k{i}"), 1, WINDOW_MS, 0).await;
        }
        rl.check("late", 1, WINDOW_MS, WINDOW_MS * 2).await;
        assert_eq!(rl.windows.lock().unwrap().len(), 1);
    }

    /// The local Redis for these tests (`TOLLGATE_TEST_REDIS_URL`); `None` skips them, and says so.
    fn redis_url() -> Option<String> {
        let url = std::env::var("TOLLGATE_TEST_REDIS_URL").ok().filter(|u| !u.is_empty());
        if url.is_none() {
            eprintln!("TOLLGATE_TEST_REDIS_URL is not set: skipping the Redis rate-limit test");
        }
        url
    }

    fn unique_key() -> String {
        format!("test-{}", ulid::Ulid::new())
    }

    #[tokio::test]
    async fn two_instances_on_one_redis_hold_one_limit_even_when_racing() {
        let Some(url) = redis_url() else { return };
        let a = std::sync::Arc::new(RedisRateLimiter::connect(&url).await.unwrap());
        let b = std::sync::Arc::new(RedisRateLimiter::connect(&url).await.unwrap());
        assert!(a.connected() && b.connected());
        let key = unique_key();
        let now = 1_000_000;
        // 150 requests alternating between the two instances: exactly 100 let through.
        let mut allowed = 0;
        for i in 0..150 {
            let limiter = if i % 2 == 0 { &a } else { &b };
            if limiter.check(&key, 100, WINDOW_MS, now + i).await.allowed {
                allowed += 1;
            }
        }
        assert_eq!(allowed, 100);
        // 200 at once on a fresh key, split across both: exactly 100.
        let key = unique_key();
        let racing = (0..200).map(|i| {
            let limiter = if i % 2 == 0 { a.clone() } else { b.clone() };
            let key = key.clone();
            tokio::spawn(async move { limiter.check(&key, 100, WINDOW_MS, now).await })
        });
        let decisions: Vec<RateDecision> =
            futures_util::future::join_all(racing).await.into_iter().map(Result::unwrap).collect();
        assert_eq!(decisions.iter().filter(|d| d.allowed).count(), 100);
        let mut remaining: Vec<u32> = decisions.iter().filter(|d| d.allowed).map(|d| d.remaining).collect();
        remaining.sort_unstable();
        assert_eq!(remaining, (0..100).collect::<Vec<_>>(), "each request saw its own count");
        assert!(decisions.iter().all(|d| d.reset_at_ms == now + WINDOW_MS));
        assert_eq!(a.failures() + b.failures(), 0);
        assert_eq!((a.counting(), b.counting()), (Counting::Shared, Counting::Shared));
    }

    #[tokio::test]
    async fn redis_windows_close_give_back_and_time_like_the_in_process_ones() {
        let Some(url) = redis_url() else { return };
        let redis = RedisRateLimiter::connect(&url).await.unwrap();
        let memory = InMemoryRateLimiter::new();
        let key = unique_key();
        // The same script of calls, answered alike by both.
        let t0 = 5_000_000;
        let mut answers = Vec::new();
        for limiter in [&redis as &dyn RateLimiter, &memory] {
            let mut seen = Vec::new();
            let first = limiter.check(&key, 2, 1_000, t0).await;
            seen.push(first);
            seen.push(limiter.check(&key, 2, 1_000, t0 + 1).await);
            seen.push(limiter.check(&key, 2, 1_000, t0 + 2).await); // refused
            limiter.give_back(&key, &first, t0 + 3).await;
            seen.push(limiter.check(&key, 2, 1_000, t0 + 4).await); // the place given back
            seen.push(limiter.check(&key, 2, 1_000, t0 + 999).await); // refused, last ms of the window
            seen.push(limiter.check(&key, 2, 1_000, t0 + 1_000).await); // a new window
            limiter.give_back(&key, &first, t0 + 1_001).await; // the old window's: nothing
            seen.push(limiter.check(&key, 2, 1_000, t0 + 1_002).await);
            seen.push(limiter.check(&key, 2, 1_000, t0 + 1_003).await); // refused
            answers.push(seen);
        }
        let allowed: Vec<bool> = answers[0].iter().map(|d| d.allowed).collect();
        assert_eq!(allowed, [true, true, false, true, false, true, true, false]);
        assert_eq!(answers[0], answers[1]);
    }

    /// A TCP proxy to Redis that can stop answering; counts the client's writes while stalled.
    struct StallingProxy {
        url: String,
        stalled: std::sync::Arc<std::sync::atomic::AtomicBool>,
        writes_while_stalled: std::sync::Arc<AtomicU64>,
    }

    async fn stalling_proxy(upstream: &str) -> StallingProxy {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let upstream = upstream.trim_start_matches("redis://").trim_end_matches('/').to_owned();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("redis://{}", listener.local_addr().unwrap());
        let stalled = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writes_while_stalled = std::sync::Arc::new(AtomicU64::new(0));
        let (stall, writes) = (stalled.clone(), writes_while_stalled.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let server = tokio::net::TcpStream::connect(&upstream).await.unwrap();
                let (mut client_read, mut client_write) = client.into_split();
                let (mut server_read, mut server_write) = server.into_split();
                let (stall_up, writes_up) = (stall.clone(), writes.clone());
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    while let Ok(n @ 1..) = client_read.read(&mut buf).await {
                        if stall_up.load(Ordering::SeqCst) {
                            writes_up.fetch_add(1, Ordering::SeqCst); // swallowed
                        } else if server_write.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                });
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    while let Ok(n @ 1..) = server_read.read(&mut buf).await {
                        if client_write.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        StallingProxy { url, stalled, writes_while_stalled }
    }

    #[tokio::test]
    async fn a_stalled_redis_is_asked_once_per_pause_not_on_every_request() {
        let Some(url) = redis_url() else { return };
        let proxy = stalling_proxy(&url).await;
        let limiter = RedisRateLimiter::connect(&proxy.url).await.unwrap();
        let key = unique_key();
        let t0 = 9_000_000;
        assert!(limiter.check(&key, 5, WINDOW_MS, t0).await.allowed);
        assert_eq!(limiter.counting(), Counting::Shared);
        proxy.stalled.store(true, Ordering::SeqCst);
        // The first request waits for Redis in vain, then is counted in process; the next ones,
        // within the pause, do not ask Redis at all.
        for i in 0..10 {
            limiter.check(&key, 5, WINDOW_MS, t0 + 1 + i).await;
        }
        assert_eq!(proxy.writes_while_stalled.load(Ordering::SeqCst), 1, "Redis asked once during the pause");
        assert_eq!(limiter.counting(), Counting::Degraded { fallbacks: 10 });
        // Redis answers again. After the pause a new connection is opened (the old one still owes
        // an answer that was lost) and every answer is this request's own.
        proxy.stalled.store(false, Ordering::SeqCst);
        let after = t0 + 11 + PAUSE_AFTER_FAILURE_MS;
        let mut allowed = Vec::new();
        for i in 0..6 {
            allowed.push(limiter.check(&key, 5, WINDOW_MS, after + i).await.allowed);
        }
        // One counted in Redis before the stall: 4 more places, then refused.
        assert_eq!(allowed, [true, true, true, true, false, false]);
        assert_eq!(limiter.counting(), Counting::Shared);
    }

    #[tokio::test]
    async fn without_redis_each_instance_limits_on_its_own_and_counts_the_failures() {
        // A port nothing listens on: connecting fails at once.
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("redis://{}", closed.local_addr().unwrap());
        drop(closed);
        let limiter = RedisRateLimiter::connect(&url).await.unwrap();
        assert!(!limiter.connected());
        let key = unique_key();
        let decisions: Vec<bool> =
            futures_util::future::join_all((0..3).map(|i| limiter.check(&key, 2, WINDOW_MS, 10 + i)))
                .await
                .into_iter()
                .map(|d| d.allowed)
                .collect();
        assert_eq!(decisions, [true, true, false], "the in-process fallback still limits");
        assert_eq!(limiter.failures(), 3, "each request counted in-process is a failure");
        assert_eq!(limiter.counting(), Counting::Degraded { fallbacks: 3 });
        assert_eq!(InMemoryRateLimiter::new().counting(), Counting::InProcess);
        assert!(RedisRateLimiter::connect("http://not-redis").await.is_err());
    }
}
