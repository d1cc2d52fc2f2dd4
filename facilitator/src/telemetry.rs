//! Prometheus metrics: what the daemon counts, and the text `GET /metrics` renders.
//!
//! Counters and histograms are recorded where things happen, through the `metrics` facade;
//! gauges that are cheaper to read than to track (backlogs, balances) are read when scraped.
//! Each instance counts its own work: sum over instances in Prometheus.
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `tollgate_payments_total` | counter | `status`, `scheme`, `network` — every payment change made here |
//! | `tollgate_settlement_seconds` | histogram | `network` — from a payment's creation to its confirmation |
//! | `tollgate_rpc_calls_total`, `tollgate_rpc_errors_total` | counter | `chain`, `method` (errors: also `kind`) |
//! | `tollgate_rpc_seconds` | histogram | `chain`, `method` |
//! | `tollgate_reconciler_backlog` | gauge | — unfinished payments the reconciler follows |
//! | `tollgate_signer_balance` | gauge | `network`, `role`, `address` — fee payer / signer, atomic units |
//! | `tollgate_rate_limited_total` | counter | `plan` |
//! | `tollgate_ws_connections` | gauge | — open WebSocket connections |
//! | `tollgate_webhook_deliveries_total` | counter | `outcome` (`delivered`, `retry`, `failed`) |
//! | `tollgate_webhook_backlog` | gauge | — deliveries waiting |
//! | `tollgate_http_requests_total` | counter | `route`, `method`, `status` |
//! | `tollgate_http_request_seconds` | histogram | `route` |

use std::sync::OnceLock;
use std::time::Duration;

use metrics::{counter, gauge, histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Installs the process's recorder (once; later calls return the same handle). `None` when
/// another recorder was installed first.
pub fn install() -> Option<&'static PrometheusHandle> {
    HANDLE
        .get_or_init(|| {
            let seconds = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0];
            let recorder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &seconds)
                .ok()?
                .build_recorder();
            let handle = recorder.handle();
            metrics::set_global_recorder(recorder).ok()?;
            describe();
            keep_up(handle.clone(), UPKEEP_PERIOD);
            Some(handle)
        })
        .as_ref()
}

/// How often histogram samples are folded into their buckets.
const UPKEEP_PERIOD: Duration = Duration::from_secs(5);

/// Folds histogram samples into their buckets every `period`, on a thread of its own (the
/// recorder may be installed outside any runtime). The recorder keeps each sample until then:
/// without this, a daemon nobody scrapes holds every request's latency, about 40 bytes a
/// request, for ever.
fn keep_up(handle: PrometheusHandle, period: Duration) {
    let spawned = std::thread::Builder::new().name("metrics-upkeep".into()).spawn(move || {
        loop {
            std::thread::sleep(period);
            handle.run_upkeep();
        }
    });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "cannot start the metrics upkeep thread: histogram samples pile up until scraped");
    }
}

fn describe() {
    metrics::describe_counter!("tollgate_payments_total", "Payment changes made by this instance");
    metrics::describe_histogram!(
        "tollgate_settlement_seconds",
        metrics::Unit::Seconds,
        "From a payment's creation to its confirmation"
    );
    metrics::describe_counter!("tollgate_rpc_calls_total", "Chain RPC calls");
    metrics::describe_counter!("tollgate_rpc_errors_total", "Chain RPC calls that failed or timed out");
    metrics::describe_histogram!("tollgate_rpc_seconds", metrics::Unit::Seconds, "Chain RPC call latency");
    metrics::describe_gauge!("tollgate_reconciler_backlog", "Unfinished payments the reconciler follows");
    metrics::describe_gauge!(
        "tollgate_signer_balance",
        "Native balance of the facilitator's fee payers and signers, atomic units (lamports, wei)"
    );
    metrics::describe_counter!("tollgate_rate_limited_total", "Requests refused by a rate limit");
    metrics::describe_gauge!("tollgate_ws_connections", "Open WebSocket connections");
    metrics::describe_counter!("tollgate_webhook_deliveries_total", "Webhook delivery attempts by outcome");
    metrics::describe_gauge!("tollgate_webhook_backlog", "Webhook deliveries waiting to be sent");
    metrics::describe_counter!("tollgate_http_requests_total", "HTTP requests answered");
    metrics::describe_histogram!("tollgate_http_request_seconds", metrics::Unit::Seconds, "HTTP request latency");
}

/// A payment changed here.
pub fn payment_changed(
    status: &'static str,
    asset: &str,
    network: &tollgate_protocol::Network,
    settled_in: Option<chrono::Duration>,
) {
    let scheme = if asset == "native" { "exact-native" } else { "exact" };
    counter!("tollgate_payments_total", "status" => status, "scheme" => scheme, "network" => network.to_string())
        .increment(1);
    if let Some(took) = settled_in {
        let took = took.to_std().unwrap_or_default();
        histogram!("tollgate_settlement_seconds", "network" => network.to_string()).record(took.as_secs_f64());
    }
}

/// How a chain RPC call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallEnd {
    /// It answered.
    Answered,
    /// It answered with an error.
    Failed,
    /// It did not answer in time.
    TimedOut,
}

/// A chain RPC call ended.
pub fn rpc_call(chain: &'static str, method: &'static str, end: CallEnd, took: Duration) {
    counter!("tollgate_rpc_calls_total", "chain" => chain, "method" => method).increment(1);
    histogram!("tollgate_rpc_seconds", "chain" => chain, "method" => method).record(took.as_secs_f64());
    let kind = match end {
        CallEnd::Answered => return,
        CallEnd::Failed => "error",
        CallEnd::TimedOut => "timeout",
    };
    counter!("tollgate_rpc_errors_total", "chain" => chain, "method" => method, "kind" => kind).increment(1);
}

/// A request was refused by its key's rate limit.
pub fn rate_limited(plan: &str) {
    counter!("tollgate_rate_limited_total", "plan" => plan.to_owned()).increment(1);
}

/// A WebSocket connection opened (`+1`) or closed (`-1`).
pub fn ws_connections(change: f64) {
    gauge!("tollgate_ws_connections").increment(change);
}

/// A webhook attempt ended: `delivered`, `retry` or `failed`.
pub fn webhook_attempt(outcome: &'static str) {
    counter!("tollgate_webhook_deliveries_total", "outcome" => outcome).increment(1);
}

/// An HTTP request was answered.
pub fn http_request(route: String, method: &'static str, status: u16, took: Duration) {
    histogram!("tollgate_http_request_seconds", "route" => route.clone()).record(took.as_secs_f64());
    counter!("tollgate_http_requests_total", "route" => route, "method" => method, "status" => status.to_string())
        .increment(1);
}

/// Sets the gauges read at scrape time.
pub fn set_backlogs(reconciler: Option<u64>, webhooks: Option<u64>) {
    #[allow(clippy::cast_precision_loss)] // a count far below 2^52
    {
        if let Some(n) = reconciler {
            gauge!("tollgate_reconciler_backlog").set(n as f64);
        }
        if let Some(n) = webhooks {
            gauge!("tollgate_webhook_backlog").set(n as f64);
        }
    }
}

/// Sets one signer's balance gauge (atomic units; the float is Prometheus's exposition format,
/// not arithmetic on money).
pub fn signer_balance(network: &str, role: &'static str, address: &str, atomic: u128) {
    #[allow(clippy::cast_precision_loss)]
    gauge!("tollgate_signer_balance", "network" => network.to_owned(), "role" => role, "address" => address.to_owned())
        .set(atomic as f64);
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    /// Installing the recorder starts its upkeep: histogram samples do not pile up unscraped.
    #[test]
    fn installing_the_recorder_starts_its_upkeep() {
        assert!(super::install().is_some());
        let names = || -> Vec<String> {
            let threads = std::fs::read_dir("/proc/self/task").unwrap();
            threads.filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok()).collect()
        };
        // A new thread names itself once it runs: give it up to a second to start.
        let started = (0..1_000).any(|_| {
            let found = names().iter().any(|n| n.trim() == "metrics-upkeep");
            if !found {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            found
        });
        assert!(started, "{:?}", names());
    }
}
