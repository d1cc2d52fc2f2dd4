//! An axum shop with one paid route and one free route.
//!
//! ```sh
//! TOLLGATE_API_KEY=tg_test_… SELLER_SOLANA=<your address> cargo run -p tollgate --example axum_seller
//! curl -i http://127.0.0.1:8080/report          # 402 with what to pay
//! ```
//!
//! Settings (environment): `TOLLGATE_URL` (the facilitator, default `http://127.0.0.1:8402`),
//! `TOLLGATE_API_KEY` (required), `SELLER_SOLANA` (the address paid, required), `LISTEN`
//! (default `127.0.0.1:8080`).

use axum::routing::get;
use axum::{Extension, Router};
use tollgate::{FacilitatorClient, Payment, PaymentLayer, Price};

/// The paid handler: it runs only once the facilitator reports the payment settled.
async fn report(Extension(payment): Extension<Payment>) -> String {
    format!(
        "Today's report. Paid {} atomic units on {} (transaction {}).\n",
        payment.amount.get(),
        payment.network,
        payment.transaction.unwrap_or_default()
    )
}

fn setting(name: &str) -> Result<String, String> {
    std::env::var(name).map_err(|_| format!("set {name} (see the example's documentation)"))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let facilitator_url = std::env::var("TOLLGATE_URL").unwrap_or_else(|_| "http://127.0.0.1:8402".into());
    let api_key = setting("TOLLGATE_API_KEY")?;
    let seller = setting("SELLER_SOLANA")?.parse()?;
    let listen = std::env::var("LISTEN").unwrap_or_else(|_| "127.0.0.1:8080".into());

    let paywall = PaymentLayer::builder()
        .facilitator(FacilitatorClient::new(facilitator_url, api_key))
        // No network named: the facilitator's Solana network (from its `/supported`).
        .accept(Price::native_sol("0.001")?.pay_to(seller))
        .description("Today's report")
        .build()?;
    let app = Router::new()
        .route("/report", get(report))
        .route_layer(paywall)
        .route("/", get(|| async { "Free: the price list. Paid: GET /report (0.001 SOL).\n" }));

    let listener = tokio::net::TcpListener::bind(&listen).await?;
    println!("shop on http://{}", listener.local_addr()?);
    axum::serve(listener, app).await?;
    Ok(())
}
