//! Prometheus metrics: the recorder (histogram buckets, samples folded in the background), and
//! each route's counters made once, not looked up per request.
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `tollgate_proxy_requests_total` | counter | `route`, `outcome` (`paid`, `challenged`, `refused`, `pending`, `unpaid`, `error`, `free`, `upstream_error`, `not_found`, `bad_request`) |
//! | `tollgate_proxy_upstream_seconds` | histogram | `route` |
//! | `tollgate_proxy_upstream_errors_total` | counter | `route` |
//! | `tollgate_proxy_reloads_total` | counter | `result` (`ok`, `error`) |

use std::time::Duration;

use metrics::{Counter, Histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// What a request's answer was, for `tollgate_proxy_requests_total`.
pub const OUTCOMES: [&str; 10] = [
    "paid",
    "challenged",
    "refused",
    "pending",
    "unpaid",
    "error",
    "free",
    "upstream_error",
    "not_found",
    "bad_request",
];

/// How often histogram samples are folded into their buckets.
const UPKEEP_PERIOD: Duration = Duration::from_secs(5);

/// Installs the process's recorder, with a thread that folds histogram samples into buckets
/// every few seconds (without it, a proxy nobody scrapes keeps every request's latency).
///
/// # Errors
/// When a recorder is installed already.
pub fn install() -> anyhow::Result<PrometheusHandle> {
    let seconds = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];
    let recorder =
        PrometheusBuilder::new().set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &seconds)?.build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder)?;
    metrics::describe_counter!("tollgate_proxy_requests_total", "Requests answered, by route and outcome");
    metrics::describe_histogram!(
        "tollgate_proxy_upstream_seconds",
        metrics::Unit::Seconds,
        "From forwarding a request to the upstream's answer head"
    );
    metrics::describe_counter!("tollgate_proxy_upstream_errors_total", "Upstreams unreachable or too slow");
    metrics::describe_counter!("tollgate_proxy_reloads_total", "Configuration reloads");
    let upkeep = handle.clone();
    std::thread::Builder::new().name("metrics-upkeep".into()).spawn(move || {
        loop {
            std::thread::sleep(UPKEEP_PERIOD);
            upkeep.run_upkeep();
        }
    })?;
    Ok(handle)
}

/// One route's metrics, registered once.
#[derive(Debug, Clone)]
pub struct RouteMetrics {
    outcomes: Vec<Counter>,
    /// The upstream's answer times.
    pub upstream_seconds: Histogram,
    /// Upstreams unreachable or too slow.
    pub upstream_errors: Counter,
}

impl RouteMetrics {
    /// The metrics of the route `name` (no-ops without a recorder).
    #[must_use]
    pub fn new(name: &str) -> Self {
        let outcomes = OUTCOMES
            .iter()
            .map(|outcome| metrics::counter!("tollgate_proxy_requests_total", "route" => name.to_owned(), "outcome" => *outcome))
            .collect();
        Self {
            outcomes,
            upstream_seconds: metrics::histogram!("tollgate_proxy_upstream_seconds", "route" => name.to_owned()),
            upstream_errors: metrics::counter!("tollgate_proxy_upstream_errors_total", "route" => name.to_owned()),
        }
    }

    /// Counts one request of `outcome` (one of [`OUTCOMES`]).
    pub fn count(&self, outcome: &str) {
        if let Some(i) = OUTCOMES.iter().position(|o| *o == outcome) {
            self.outcomes[i].increment(1);
        }
    }
}
