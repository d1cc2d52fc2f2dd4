//! Per-key rate limiting in fixed one-minute windows.
//!
//! A key's window opens at its first request and lasts 60 s; within it the key may make `limit`
//! requests, and request `limit + 1` is refused until the window closes. The answer carries what
//! the `X-RateLimit-*` and `Retry-After` headers need. Fixed windows make `X-RateLimit-Reset` an
//! exact promise (the moment the full limit is available again), at the price of allowing up to
//! twice the limit across a window boundary.
//!
//! [`RateLimiter`] is a trait so that instances behind a load balancer can share limits through
//! an external store; [`InMemoryRateLimiter`] is the single-instance default.

use std::collections::HashMap;
use std::sync::Mutex;

/// Window length.
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
}

/// Counts requests per key.
pub trait RateLimiter: Send + Sync + 'static {
    /// Counts one request of `key` at `now_ms` against `limit` per window.
    fn check(&self, key: &str, limit: u32, now_ms: i64) -> RateDecision;

    /// Gives one request back to the window of `key` that `counted` it (nothing once that window
    /// has closed: a place given back never carries over into the next window).
    fn give_back(&self, key: &str, counted: &RateDecision, now_ms: i64);
}

#[derive(Debug, Clone, Copy)]
struct Window {
    start_ms: i64,
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
}

impl RateLimiter for InMemoryRateLimiter {
    fn check(&self, key: &str, limit: u32, now_ms: i64) -> RateDecision {
        // A poisoned lock only means another request panicked mid-update; the counts are still usable.
        let mut windows = self.windows.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let window = match windows.get_mut(key) {
            Some(w) if now_ms < w.start_ms + WINDOW_MS => w,
            Some(w) => {
                *w = Window { start_ms: now_ms, count: 0 };
                w
            }
            None => {
                if windows.len() >= SWEEP_THRESHOLD {
                    windows.retain(|_, w| now_ms < w.start_ms + WINDOW_MS);
                }
                windows.entry(key.to_owned()).or_insert(Window { start_ms: now_ms, count: 0 })
            }
        };
        let allowed = window.count < limit;
        if allowed {
            window.count += 1;
        }
        RateDecision {
            allowed,
            limit,
            remaining: limit.saturating_sub(window.count),
            reset_at_ms: window.start_ms + WINDOW_MS,
        }
    }

    fn give_back(&self, key: &str, counted: &RateDecision, now_ms: i64) {
        let mut windows = self.windows.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(w) = windows.get_mut(key)
            && now_ms < w.start_ms + WINDOW_MS
            && w.start_ms + WINDOW_MS == counted.reset_at_ms
        {
            w.count = w.count.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_given_back_frees_its_place_in_the_same_window_only() {
        let limiter = InMemoryRateLimiter::new();
        let first = limiter.check("k", 1, 0);
        assert!(first.allowed);
        assert!(!limiter.check("k", 1, 1).allowed);
        limiter.give_back("k", &first, 2);
        let second = limiter.check("k", 1, 3);
        assert!(second.allowed, "the place given back is taken again");
        limiter.give_back("k", &second, WINDOW_MS + 5); // the window has closed: nothing to give back
        let next = limiter.check("k", 1, WINDOW_MS + 6);
        assert!(next.allowed);
        // A request counted in the old window, refused after the new one opened, gives nothing back
        // to the new window (no carrying places over windows).
        limiter.give_back("k", &second, WINDOW_MS + 7);
        assert!(!limiter.check("k", 1, WINDOW_MS + 8).allowed);
        limiter.give_back("unknown", &next, 0);
    }

    #[test]
    fn the_request_after_the_limit_is_refused_until_the_window_closes() {
        let rl = InMemoryRateLimiter::new();
        let t0 = 1_000_000;
        for i in 0..100 {
            let d = rl.check("k", 100, t0 + i);
            assert!(d.allowed, "request {} refused", i + 1);
            assert_eq!(d.remaining, 99 - u32::try_from(i).unwrap());
        }
        let refused = rl.check("k", 100, t0 + 30_000);
        assert!(!refused.allowed);
        assert_eq!(refused.remaining, 0);
        assert_eq!(refused.reset_at_ms, t0 + WINDOW_MS);
        assert_eq!(refused.retry_after_secs(t0 + 30_000), 30);
        // Another key is not affected.
        assert!(rl.check("other", 100, t0 + 30_000).allowed);
        // Just before the window closes: still refused. At the boundary: a fresh window.
        assert!(!rl.check("k", 100, t0 + WINDOW_MS - 1).allowed);
        let fresh = rl.check("k", 100, t0 + WINDOW_MS);
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

    #[test]
    fn sweeps_closed_windows() {
        let rl = InMemoryRateLimiter::new();
        for i in 0..SWEEP_THRESHOLD {
            rl.check(&format!("k{i}"), 1, 0);
        }
        rl.check("late", 1, WINDOW_MS * 2);
        assert_eq!(rl.windows.lock().unwrap().len(), 1);
    }
}
