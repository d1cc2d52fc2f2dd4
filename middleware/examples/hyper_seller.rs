//! The layer on plain hyper (no axum): a tower service made payable, served over HTTP/1. hyper's
//! own request body is wrapped in the layer's `RequestBody`, which the layer can read (to tell a
//! repeat of a paid request from another) and hand on.
//!
//! ```sh
//! TOLLGATE_API_KEY=tg_test_… SELLER_EVM=0x… cargo run -p tollgate --example hyper_seller
//! ```
//!
//! Settings (environment): `TOLLGATE_URL` (default `http://127.0.0.1:8402`), `TOLLGATE_API_KEY`,
//! `SELLER_EVM` (the address paid), `EVM_NETWORK` (CAIP-2, default `eip155:8453`), `LISTEN`
//! (default `127.0.0.1:8081`).

use std::convert::Infallible;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use tollgate::body::RequestBody;
use tollgate::{FacilitatorClient, Payment, PaymentLayer, Price};

fn setting(name: &str) -> Result<String, String> {
    std::env::var(name).map_err(|_| format!("set {name} (see the example's documentation)"))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let facilitator_url = std::env::var("TOLLGATE_URL").unwrap_or_else(|_| "http://127.0.0.1:8402".into());
    let network = std::env::var("EVM_NETWORK").unwrap_or_else(|_| "eip155:8453".into()).parse()?;
    let paywall = PaymentLayer::builder()
        .facilitator(FacilitatorClient::new(facilitator_url, setting("TOLLGATE_API_KEY")?))
        .accept(Price::native_eth("0.00001")?.on(network).pay_to(setting("SELLER_EVM")?.parse()?))
        .description("One answer")
        .build()?;

    // The handler finds what was paid in the request's extensions.
    let handler = tower::service_fn(|request: Request<RequestBody>| async move {
        let paid = request.extensions().get::<Payment>().map_or(0, |p| p.amount.get());
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(format!("42 (paid {paid} wei)\n")))))
    });
    let service = tower::ServiceBuilder::new()
        .map_request(|request: Request<hyper::body::Incoming>| request.map(RequestBody::new))
        .layer(paywall)
        .service(handler);

    let listen = std::env::var("LISTEN").unwrap_or_else(|_| "127.0.0.1:8081".into());
    let listener = tokio::net::TcpListener::bind(&listen).await?;
    println!("answers on http://{}", listener.local_addr()?);
    loop {
        let (stream, _) = listener.accept().await?;
        let service = hyper_util::service::TowerToHyperService::new(service.clone());
        tokio::spawn(async move {
            let connection = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            if let Err(e) = connection.await {
                eprintln!("connection: {e}");
            }
        });
    }
}
