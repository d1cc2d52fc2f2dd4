//! `tollgate-load catalog`: the discovery catalog's query latency over a filled catalog (issue 46:
//! 100,000 entries), on SQLite or PostgreSQL, through the store the daemon uses.
//!
//! Entries are made as the daemon makes them ([`tollgate_facilitator::discovery::entry_of`]: a
//! declared HTTP route of one of 500 sellers, described by words from a 400-word vocabulary, on
//! one of four networks), then each query runs `--queries` times; the report is one JSON line
//! per query with its p50 and p99 in microseconds.

use std::time::{Duration, Instant};

use chrono::Utc;
use rand::{Rng as _, SeedableRng as _};
use serde_json::json;
use tollgate_facilitator::config::DatabaseUrl;
use tollgate_facilitator::discovery::{MAX_LIMIT, entry_of, words};
use tollgate_facilitator::store::{CatalogFilter, CatalogStore as _, SqlStore};
use tollgate_protocol::x402::{PaymentRequirements, ResourceInfo};

/// Networks the entries are spread over.
const NETWORKS: [&str; 4] = ["eip155:8453", "eip155:84532", "solana:5eykt4UsFv8P8NDJdTREpY1vzqKqZKvd", "eip155:1"];

/// The vocabulary's `i`th word (`w0` … `w399`, with a few real ones the queries use).
fn word(i: usize) -> String {
    match i {
        0 => "weather".into(),
        1 => "forecast".into(),
        2 => "report".into(),
        3 => "market".into(),
        _ => format!("w{i}"),
    }
}

/// Fills the catalog at `database` with `entries` entries (`phase` `fill` or `both`), then
/// times each query `queries` times (`measure` or `both`).
///
/// # Errors
/// The store cannot be opened or written.
pub async fn run(database: &str, entries: usize, queries: usize, phase: &str) -> anyhow::Result<()> {
    let url = DatabaseUrl::parse(database).map_err(|e| anyhow::anyhow!("{e}"))?;
    let store = SqlStore::connect(&url).await?;
    let now = Utc::now();
    if matches!(phase, "fill" | "both") {
        fill(&store, entries, now).await?;
    }
    if matches!(phase, "measure" | "both") {
        measure(&store, entries, queries, now).await?;
    }
    Ok(())
}

/// `entries` entries, settled in the second before `now`, one after another.
async fn fill(store: &SqlStore, entries: usize, now: chrono::DateTime<Utc>) -> anyhow::Result<()> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(46);
    let started = Instant::now();
    for i in 0..entries {
        let account = format!("acct_{:03}", i % 500);
        let network = NETWORKS[i % NETWORKS.len()];
        let described: Vec<String> = (0..6).map(|_| word(rng.random_range(0..400))).collect();
        // One entry in a thousand says a word no other does.
        let description = if i % 1000 == 7 { format!("{} unusual", described.join(" ")) } else { described.join(" ") };
        let resource: ResourceInfo = serde_json::from_value(json!({
            "url": format!("https://seller{}.example/api/{i}?q=1", i % 500),
            "description": description,
            "mimeType": "application/json",
            "serviceName": format!("Seller {}", i % 500),
            "tags": [word(rng.random_range(0..400)), word(rng.random_range(0..400))],
        }))?;
        let requirement: PaymentRequirements = serde_json::from_value(json!({
            "scheme": "exact", "network": network, "amount": (1000 + i % 97).to_string(),
            "asset": if network.starts_with("solana") { "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v" } else { "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913" },
            "payTo": if network.starts_with("solana") { "9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin".to_owned() } else { format!("0x{:040x}", i % 500 + 1) },
            "maxTimeoutSeconds": 60,
        }))?;
        let mut extensions = serde_json::Map::new();
        extensions.insert(
            "bazaar".into(),
            json!({"info": {"input": {"type": "http", "method": "GET", "queryParams": {"city": "Lisbon"}},
                     "output": {"type": "json", "example": {"ok": true}}},
                   "schema": {"type": "object"}}),
        );
        let at = now - chrono::Duration::seconds(i64::try_from(entries - i).unwrap_or(0));
        let entry = entry_of(&account, 2, &resource, &requirement, &extensions, at)
            .map_err(|e| anyhow::anyhow!("entry {i}: {e:?}"))?;
        store.catalog(&entry).await?;
    }
    eprintln!("filled {entries} entries in {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// Each list and search query, `queries` times: one JSON line each.
async fn measure(store: &SqlStore, entries: usize, queries: usize, now: chrono::DateTime<Utc>) -> anyhow::Result<()> {
    let since = (now - chrono::Duration::days(30)).timestamp();
    let base = CatalogFilter { settled_since: since, limit: 20, ..CatalogFilter::default() };
    let cases: Vec<(&str, CatalogFilter)> = vec![
        ("list: first page", base.clone()),
        (
            "list: type and network",
            CatalogFilter { kind: Some("http".into()), network: Some(NETWORKS[1].into()), ..base.clone() },
        ),
        ("list: 100 entries at offset 50,000", CatalogFilter { offset: 50_000, limit: MAX_LIMIT, ..base.clone() }),
        ("search: one common word", CatalogFilter { words: words("weather"), ..base.clone() }),
        ("search: two words", CatalogFilter { words: words("weather forecast"), ..base.clone() }),
        ("search: a word in 1 of 1,000 entries", CatalogFilter { words: words("unusual"), ..base.clone() }),
        ("search: a word in no entry", CatalogFilter { words: words("nowhere"), ..base.clone() }),
    ];
    for (name, filter) in cases {
        let mut took: Vec<Duration> = Vec::with_capacity(queries);
        let mut found = (0, 0);
        for _ in 0..queries {
            let start = Instant::now();
            let (page, total) = store.catalog_list(&filter).await?;
            took.push(start.elapsed());
            found = (page.len(), total);
        }
        took.sort_unstable();
        // The permille'th fastest run.
        let at = |permille: usize| took[(took.len() - 1) * permille / 1000].as_micros();
        println!(
            "{}",
            json!({"query": name, "entries": entries, "runs": queries, "p50_us": at(500), "p99_us": at(990),
                   "page": found.0, "total": found.1})
        );
    }
    Ok(())
}
