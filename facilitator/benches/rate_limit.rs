//! Benchmark: what counting a request costs, in process and through Redis (shared by instances).
//!
//! Times every `check` of 20,000 requests (after 2,000 to warm up), one at a time and then 32 at
//! once, and prints p50 / p99 / max for each limiter. The Redis run needs a server:
//! `TOLLGATE_BENCH_REDIS_URL=redis://127.0.0.1:6379 cargo bench -p tollgate-facilitator --bench rate_limit`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed benchmark
#![allow(missing_docs)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use tollgate_facilitator::auth::rate_limit::{InMemoryRateLimiter, RateLimiter, RedisRateLimiter, WINDOW_MS};

const REQUESTS: usize = 20_000;
const WARM_UP: usize = 2_000;
const CONCURRENCY: usize = 32;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((sorted.len() as f64) * p).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn report(name: &str, mut samples: Vec<Duration>) {
    samples.sort_unstable();
    println!(
        "{name:<40} n={:>6}  p50={:>8.1} µs  p99={:>8.1} µs  max={:>8.1} µs",
        samples.len(),
        percentile(&samples, 0.50).as_secs_f64() * 1e6,
        percentile(&samples, 0.99).as_secs_f64() * 1e6,
        samples.last().unwrap().as_secs_f64() * 1e6,
    );
}

async fn sequential(limiter: &dyn RateLimiter) -> Vec<Duration> {
    let now = chrono::Utc::now().timestamp_millis();
    let key = format!("bench-{}", ulid::Ulid::new());
    let mut samples = Vec::with_capacity(REQUESTS);
    for i in 0..(WARM_UP + REQUESTS) {
        let started = Instant::now();
        let d = limiter.check(&key, u32::MAX, WINDOW_MS, now).await;
        let took = started.elapsed();
        assert!(d.allowed);
        if i >= WARM_UP {
            samples.push(took);
        }
    }
    samples
}

async fn concurrent(limiter: Arc<dyn RateLimiter>) -> Vec<Duration> {
    let now = chrono::Utc::now().timestamp_millis();
    let tasks = (0..CONCURRENCY).map(|t| {
        let limiter = limiter.clone();
        tokio::spawn(async move {
            let key = format!("bench-{t}-{}", ulid::Ulid::new());
            let mut samples = Vec::new();
            for i in 0..(WARM_UP + REQUESTS) / CONCURRENCY {
                let started = Instant::now();
                limiter.check(&key, u32::MAX, WINDOW_MS, now).await;
                if i >= WARM_UP / CONCURRENCY {
                    samples.push(started.elapsed());
                }
            }
            samples
        })
    });
    futures_util::future::join_all(tasks).await.into_iter().flat_map(Result::unwrap).collect()
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let memory: Arc<dyn RateLimiter> = Arc::new(InMemoryRateLimiter::new());
        report("in-process, one at a time", sequential(&*memory).await);
        report(&format!("in-process, {CONCURRENCY} at once"), concurrent(memory).await);
        match std::env::var("TOLLGATE_BENCH_REDIS_URL") {
            Ok(url) if !url.is_empty() => {
                let redis = Arc::new(RedisRateLimiter::connect(&url).await.unwrap());
                assert!(redis.connected(), "Redis at TOLLGATE_BENCH_REDIS_URL does not answer");
                report("Redis (Lua script), one at a time", sequential(&*redis).await);
                let shared: Arc<dyn RateLimiter> = redis.clone();
                report(&format!("Redis (Lua script), {CONCURRENCY} at once"), concurrent(shared).await);
                assert_eq!(redis.failures(), 0, "every request was counted by Redis");
            }
            _ => println!("TOLLGATE_BENCH_REDIS_URL is not set: the Redis limiter was not measured"),
        }
    });
}
