//! The demo's proxied service: a Python HTTP service (`proxy/examples/upstream.py`, run with the
//! system's `python3`) that knows nothing of payments, sold through `tollgate-proxy` configured
//! by a TOML file the demo writes to its data folder — what a seller with a service in any
//! language does.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;

use tokio::io::AsyncBufReadExt as _;

use crate::EvmDemo;
use crate::shop::{DEMO_TOKEN_DECIMALS, DEMO_TOKEN_NAME, PERMIT2_TOKEN_NAME};

/// The upstream's source, written to the data folder and run from there.
const UPSTREAM: &str = include_str!("../../proxy/examples/upstream.py");

/// The running proxied service.
#[derive(Debug)]
pub struct Proxied {
    /// The proxy's URL.
    pub url: String,
    /// The configuration it runs (in the data folder).
    pub config: std::path::PathBuf,
    /// The Python process (stopped with the demo: [`Proxied::stop`], or when dropped).
    upstream: tokio::process::Child,
}

/// Starts the upstream and the proxy in front of it on `addr`, paid to `seller` (and the EVM
/// seller when `evm` is on), through the facilitator at `facilitator_url` with `api_key`.
pub(crate) async fn start(
    data_dir: &Path,
    addr: SocketAddr,
    (facilitator_url, api_key): (&str, &str),
    (seller, spl_token): (&str, &str),
    evm: Option<&EvmDemo>,
) -> anyhow::Result<Proxied> {
    let script = data_dir.join("upstream.py");
    std::fs::write(&script, UPSTREAM)?;
    let secret = format!("{:032x}", rand_u128());
    crate::write_private(&data_dir.join("proxy-upstream.secret"), &secret)?;
    crate::write_private(&data_dir.join("proxy-facilitator.key"), api_key)?;
    let mut upstream = tokio::process::Command::new("python3")
        .arg(&script)
        .args(["--port", "0"])
        .env("TOLLGATE_PROXY_SECRET", &secret)
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| anyhow::anyhow!("python3 could not run the proxied service: {e}"))?;
    let stdout = upstream.stdout.take().ok_or_else(|| anyhow::anyhow!("no upstream output"))?;
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let line = tokio::time::timeout(std::time::Duration::from_secs(20), lines.next_line())
        .await
        .map_err(|_| anyhow::anyhow!("the proxied service did not start within 20 s"))??
        .ok_or_else(|| anyhow::anyhow!("the proxied service ended before listening"))?;
    let upstream_url = line
        .strip_prefix("listening on ")
        .ok_or_else(|| anyhow::anyhow!("unexpected upstream output: {line}"))?
        .to_owned();

    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let url = format!("http://{bound}");
    let config = data_dir.join("proxy.toml");
    std::fs::write(&config, config_text(bound, &upstream_url, (facilitator_url, data_dir), (seller, spl_token), evm))?;
    let file = tollgate_proxy::ProxyFile::read(&config)?;
    let proxy = Arc::new(tollgate_proxy::Proxy::new(&file, None)?);
    tokio::spawn(tollgate_proxy::server::serve(
        listener,
        proxy.clone(),
        std::future::pending(),
        std::time::Duration::from_secs(1),
    ));
    tokio::spawn(tollgate_proxy::server::watch(proxy, config.clone(), std::time::Duration::from_secs(1)));
    Ok(Proxied { url, config, upstream })
}

impl Proxied {
    /// Stops the Python process and waits for it to end.
    pub async fn stop(mut self) {
        if let Err(e) = self.upstream.kill().await {
            tracing::warn!(error = %e, "the proxied service could not be stopped");
        }
    }
}

/// Randomness for the shared secret, from the OS (through std's hasher seeds).
fn rand_u128() -> u128 {
    use std::hash::{BuildHasher as _, Hasher as _};
    let mut out = 0u128;
    for _ in 0..2 {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u128(out);
        out = (out << 64) | u128::from(hasher.finish());
    }
    out
}

/// The proxy's configuration: what a seller writes.
fn config_text(
    addr: SocketAddr,
    upstream: &str,
    (facilitator_url, data_dir): (&str, &Path),
    (seller, spl_token): (&str, &str),
    evm: Option<&EvmDemo>,
) -> String {
    let sol =
        |amount: &str| format!("[[route.accept]]\nasset = \"SOL\"\namount = \"{amount}\"\npay_to = \"{seller}\"\n");
    let mut forecast = format!(
        "[[route.accept]]\nasset = \"{spl_token}\"\namount = \"0.01\"\ndecimals = {DEMO_TOKEN_DECIMALS}\npay_to = \"{seller}\"\n\n{}",
        sol("0.001")
    );
    let mut summary = String::new();
    if let Some(evm) = evm {
        let network = format!("eip155:{}", evm.chain_id);
        forecast.push_str(&format!(
            "\n[[route.accept]]\nasset = \"ETH\"\namount = \"0.0001\"\npay_to = \"{}\"\nnetwork = \"{network}\"\n",
            evm.seller
        ));
        // Per call from a payment channel (x402 batch-settlement): a voucher per request. Its
        // withdrawal delay (30 min) differs from the shop's /ticker (15 min), so that the two
        // sellers, each with its own journal, never count one channel twice.
        forecast.push_str(&format!(
            "\n[[route.accept]]\nscheme = \"batch-settlement\"\nasset = \"{}\"\namount = \"0.0001\"\ndecimals = {DEMO_TOKEN_DECIMALS}\npay_to = \"{}\"\nnetwork = \"{network}\"\nextra = {{ name = \"{DEMO_TOKEN_NAME}\", version = \"2\", withdrawDelay = 1800 }}\n",
            evm.token, evm.seller
        ));
        if let Some(pusd) = &evm.permit2_token {
            summary = format!(
                r#"
# Metered (x402 upto): the buyer authorizes at most 0.05 PUSD; the upstream reports the words
# it wrote in X-Usage-Words, and the proxy settles 0.001 PUSD a word.
[[route]]
name = "summary"
path = "/summary"
methods = ["GET"]
description = "A summary, charged 0.001 PUSD a word it has (at most 0.05)"
usage = {{ header = "X-Usage-Words", unit_price = "0.001" }}
discovery = {{ query_example = {{ words = "12" }}, output_example = {{ summary = "lorem ipsum" }} }}
[[route.accept]]
asset = "{pusd}"
max = "0.05"
decimals = {DEMO_TOKEN_DECIMALS}
pay_to = "{seller}"
network = "{network}"
extra = {{ name = "{PERMIT2_TOKEN_NAME}", version = "1" }}
"#,
                seller = evm.seller
            );
        }
    }
    format!(
        r#"# tollgate-proxy: a Python service (upstream.py) sold per request. Edit and save: the
# proxy reloads it. Written by tollgate-demo.
listen = "{addr}"
upstream = "{upstream}"
# Where buyers reach the proxy: the resources it sells (and catalogs list) are named on it.
public_url = "http://{addr}"
# Where routes priced per call from payment channels keep them.
channels_file = "{channels}"

[facilitator]
url = "{facilitator_url}"
api_key_file = "{key}"

# The upstream learns who paid from signed headers (X-Tollgate-Payer, …, X-Tollgate-Signature).
[identity]
secret_file = "{secret}"

[[route]]
name = "status"
path = "/status"
free = true

[[route]]
name = "forecast"
path = "/forecast"
methods = ["GET"]
description = "Tomorrow's forecast for a city"
# How agents learn to call it (x402 bazaar): in its 402s and the proxy's /.well-known/x402.json.
discovery = {{ query_example = {{ city = "Paris" }}, output_example = {{ city = "Paris", forecast = "sunny, 21 C" }}, service_name = "Demo weather", tags = ["weather", "demo"] }}
{forecast}
[[route]]
name = "events"
path = "/events"
methods = ["GET"]
description = "A stream of server-sent events"
{events}
[[route]]
name = "upload"
path = "/upload"
methods = ["POST"]
description = "Stores a file of any size (streamed)"
{events}
[[route]]
name = "whoami"
path = "/whoami"
description = "Who paid, as the upstream reads it"
discovery = {{ output_example = {{ paid_by = "9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin" }} }}
{events}{summary}"#,
        key = data_dir.join("proxy-facilitator.key").display(),
        secret = data_dir.join("proxy-upstream.secret").display(),
        channels = data_dir.join("proxy-channels.jsonl").display(),
        events = sol("0.001"),
    )
}
