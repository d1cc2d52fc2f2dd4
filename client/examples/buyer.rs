//! Fetches a URL and pays its 402, if it answers one, with an EVM key under a spending cap.
//!
//! ```sh
//! TOLLGATE_EVM_KEY=0x… cargo run -p tollgate-client --example buyer -- http://127.0.0.1:8081/
//! ```
//!
//! Settings (environment): `TOLLGATE_EVM_KEY` (hex private key, required), `TOLLGATE_EVM_RPC_URL`
//! (default `http://127.0.0.1:8545`), `MAX` (the most to pay, whole units; default `0.001`).

use tollgate_client::{Buyer, Cap, PrivateKeySigner};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args().nth(1).ok_or("usage: buyer <url>")?;
    let key: PrivateKeySigner =
        std::env::var("TOLLGATE_EVM_KEY").map_err(|_| "set TOLLGATE_EVM_KEY")?.trim().parse()?;
    let rpc = std::env::var("TOLLGATE_EVM_RPC_URL").unwrap_or_else(|_| "http://127.0.0.1:8545".into());
    let cap = Cap::whole(&std::env::var("MAX").unwrap_or_else(|_| "0.001".into()))?;

    let buyer = Buyer::new().with_evm(key, &rpc)?.with_cap(cap);
    let answer = buyer.get(&url).await?;
    if let Some(paid) = &answer.payment {
        eprintln!(
            "paid {} atomic units on {} (transaction {})",
            paid.amount.get(),
            paid.network,
            paid.transaction.as_deref().unwrap_or("not reported")
        );
    }
    println!("{}", answer.body_text());
    Ok(())
}
